// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only)
// dbtap's kernel side: socket data of traced database server processes (the socket tracepoints,
// or syscall tracepoints where the kernel has none) and TLS plaintext (OpenSSL uprobes), as
// records in one BPF ring buffer.
// Record layouts are mirrored in crates/ebpf/src/record.rs; keep both in step.
// x86_64 only (syscall numbers and pt_regs argument registers).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define COPY_MAX 16384 /* bytes copied per record; the rest of a chunk is an exact gap */
#define MAX_CHUNKS 4   /* records per plain buffer (the rest is one gap) */
#define MAX_IOV 16     /* iovecs read per readv/writev/recvmsg/sendmsg (the rest is one gap) */

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define SOCK_STREAM 1
#define IPPROTO_TCP 6
#define MSG_PEEK 2

enum { DK_DATA = 1, DK_OPEN = 2, DK_CLOSE = 3, DK_EXIT = 4 };
enum { DF_INBOUND = 1, DF_TLS = 2, DF_ACCEPTED = 4, DF_PEER_PID = 8, DF_OUTGOING = 16 };
enum { DOP_READ = 1, DOP_WRITE, DOP_READV, DOP_WRITEV, DOP_RECVMSG, DOP_SENDMSG, DOP_ACCEPT, DOP_CLOSE,
       DOP_CONNECT };
#define EINPROGRESS 115

struct hdr {
	u8 kind;
	u8 flags;
	u16 _pad;
	u32 pid;
	u64 ts;
	u64 sock;
	u64 offset;
	u64 len;
	u32 nbytes;
	u32 _pad2;
};

struct data_rec {
	struct hdr h;
	u8 data[COPY_MAX];
};

struct open_rec {
	struct hdr h;
	u16 lfam, lport, rfam, rport;
	u8 laddr[16];
	u8 raddr[16];
	u32 peer_pid;
	u16 lpath_len, rpath_len;
	char lpath[112];
	char rpath[112];
};

struct config {
	u32 tcp_plaintext;
	/* Copy through the per-CPU scratch even where the direct copy exists (0 from user space
	 * today): a value the verifier cannot know, so it checks both paths on every load. */
	u32 copy_twice;
	u64 wake_bytes;
};

struct counters {
	u64 lost_records;
	u64 lost_bytes;
	u64 truncated_records;
	u64 truncated_bytes;
	u64 lost_opens;
	u64 iov_gaps;
};

struct sock_state {
	u64 off[2];
	u8 announced;
	/* Seen from its start (accept, or connect): DF_ACCEPTED on its Open. */
	u8 accepted;
	/* Connected by the traced process (it is the client): DF_OUTGOING on its Open. */
	u8 outgoing;
	u8 _pad[5];
};

struct ssl_ctx {
	u32 depth;
	u32 op;
	u64 ssl;
	u64 buf;
	u64 exptr;
	u64 sock;
	u64 sk;
};

struct ssl_key {
	u64 ssl;
	u32 tgid;
	u32 _pad;
};

struct sock_ref {
	u64 sock;
	u64 sk;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct config);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct data_rec);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct open_rec);
} open_scratch SEC(".maps");

/* Per thread: the SSL call state (task storage: no hash, freed with the thread). */
struct tstate {
	struct ssl_ctx x;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate);
} tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, struct sock_state);
} socks SEC(".maps");

/* Closes the ring had no room for: socket -> final offsets {out, in}; user space drains it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, u64[2]);
} lost_closes SEC(".maps");

/* Set to 1 when an entry goes into lost_closes: user space walks that map (a walk of an LRU
 * hash visits every bucket, even when it is empty) only when this says there is something. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lost_closes_pending SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ssl_key);
	__type(value, struct sock_ref);
} ssl_socks SEC(".maps");

/* The traced processes: one bit per process id (pid_max is at most 4,194,304 on 64-bit
 * kernels: 512 KiB), so the check on every run is one load, where a hash map keyed by the
 * process id cost a lookup (a call) per run, also for every other process's runs of the same
 * tracepoints. Written only with atomic operations: by on_fork and on_exit, and by user space
 * through the set_traced program (run with BPF_PROG_RUN), never by a read-modify-write of a
 * whole word from user space, which could undo a concurrent fork's or exit's bit. */
#define PID_LIMIT (4 << 20)
u64 traced_bits[PID_LIMIT / 64] = {};

/* The word of `tgid` (< PID_LIMIT) in traced_bits: masked where the verifier sees it (the
 * compiler would otherwise index with a copy of the id that the bound check did not cover). */
static __always_inline u32 traced_word(u32 tgid)
{
	asm volatile("" : "+r"(tgid));
	return (tgid >> 6) & (PID_LIMIT / 64 - 1);
}

static __always_inline int tgid_traced(u32 tgid)
{
	if (tgid >= PID_LIMIT)
		return 0;
	return (traced_bits[traced_word(tgid)] >> (tgid & 63)) & 1;
}

/* Sets (`set`) or clears the bit of `tgid`; 0 when done, 1 when the id is out of range. */
static __always_inline int mark_traced(u32 tgid, int set)
{
	if (tgid >= PID_LIMIT)
		return 1;
	u32 w = traced_word(tgid);
	u64 bit = 1ULL << (tgid & 63);
	if (set)
		__sync_fetch_and_or(&traced_bits[w], bit);
	else
		__sync_fetch_and_and(&traced_bits[w], ~bit);
	return 0;
}

/* 1 once a traced thread has entered an SSL call: before that no thread has SSL state, and a
 * traced call skips the task-storage lookup (a helper call per run). Set and read by the same
 * thread first (its ssl_enter, then its system calls), so no ordering is needed. */
volatile u32 ssl_entered = 0;

static __always_inline struct tstate *task_tstate(struct task_struct *t, int create)
{
	return bpf_task_storage_get(&tstates, t, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline struct tstate *tstate(int create)
{
	return task_tstate(bpf_get_current_task_btf(), create);
}

static __always_inline struct counters *ctrs(void)
{
	u32 z = 0;
	return bpf_map_lookup_elem(&counters, &z);
}

/* The wake-up flag of a record of `size` bytes, `reserved` when the ring already counts it.
 * User space is woken once per `wake_bytes` that become pending: by the record that takes the
 * pending bytes across a multiple of it, not by every record while that much is pending. Each
 * wake-up is an IRQ-work self-interrupt on the producing CPU (in the traced process's time),
 * and until the reader runs, every record would raise another one (0.3-0.8 per query were
 * counted in /proc/interrupts' IWI line at 10k QPS). A crossing missed by a race with another
 * CPU's record is caught at the next multiple, and the reader's poll timeout bounds the rest. */
static __always_inline u64 wake_flags(u64 size, int reserved)
{
	u32 z = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &z);
	u64 wake = c ? c->wake_bytes : 0;
	if (!wake)
		return BPF_RB_FORCE_WAKEUP;
	u64 avail = bpf_ringbuf_query(&ring, BPF_RB_AVAIL_DATA);
	/* The ring's own 8-byte record header and the rounding to 8 bytes. */
	size += 16;
	u64 before = reserved ? (avail > size ? avail - size : 0) : avail;
	return before / wake != (before + size) / wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline int tcp_plaintext(void)
{
	u32 z = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &z);
	return c && c->tcp_plaintext;
}

/* The current process id if it is traced, else 0. */
static __always_inline u32 traced_pid(void)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	return tgid_traced(tgid) ? tgid : 0;
}

static __always_inline int is_traced(void)
{
	return traced_pid() != 0;
}

/* A read-only typed view of a kernel pointer: its fields are then read by direct (BTF, CO-RE)
 * loads, much cheaper than one bpf_probe_read_kernel per field. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#define KCAST(type, p) ((type *)bpf_rdonly_cast((void *)(p), bpf_core_type_id_kernel(type)))

/* The struct file behind `fd` of task `t` (the current one), or 0. */
static __always_inline struct file *task_fd_file(struct task_struct *t, u32 fd)
{
	struct fdtable *fdt = t->files->fdt;
	if (!fdt || fd >= fdt->max_fds)
		return 0;
	struct file **arr = fdt->fd;
	/* The slot by a direct load, not a helper call: the verifier allows no variable index into
	 * a BTF pointer, but the slot's address may be cast to a struct whose first member is a
	 * struct file * (struct kiocb; CO-RE checks that at load time, else the helper reads). */
	if (bpf_core_field_offset(struct kiocb, ki_filp) == 0)
		return KCAST(struct kiocb, &arr[fd])->ki_filp;
	struct file *f = 0;
	bpf_probe_read_kernel(&f, sizeof(f), &arr[fd]);
	return f;
}

/* The same for the current task. */
static __always_inline struct file *fd_file(u32 fd)
{
	return task_fd_file(bpf_get_current_task_btf(), fd);
}

static __always_inline u64 socket_key(struct socket *so, u64 ino, u64 *sk_out, u16 *tcp);

/* A traced stream socket behind `fp` (AF_UNIX with an address, or TCP): returns its inode
 * number (the stream key), 0 if none.
 * `*sk_out` gets the struct sock, `*tcp` whether it is TCP (else AF_UNIX). */
static __always_inline u64 file_sock(struct file *fp, u64 *sk_out, u16 *tcp)
{
	if (!fp)
		return 0;
	struct file *f = KCAST(struct file, fp);
	struct inode *ino = f->f_inode;
	if (!ino || (ino->i_mode & S_IFMT) != S_IFSOCK)
		return 0;
	struct socket *so = KCAST(struct socket, f->private_data);
	if (!so)
		return 0;
	return socket_key(so, ino->i_ino, sk_out, tcp);
}

/* The inode number of socket `sop` (struct socket_alloc holds both): the stream key. */
static __always_inline u64 socket_ino(struct socket *sop)
{
	u64 base = (u64)sop - bpf_core_field_offset(struct socket_alloc, socket);
	return KCAST(struct socket_alloc, base)->vfs_inode.i_ino;
}

/* The same as file_sock for the struct sock of a socket tracepoint. */
static __always_inline u64 sk_sock(struct sock *skp, u64 *sk_out, u16 *tcp)
{
	struct socket *sop = skp->sk_socket;
	if (!sop)
		return 0;
	return socket_key(KCAST(struct socket, sop), socket_ino(sop), sk_out, tcp);
}

/* The key (`ino`) of socket `so` if it is a traced stream socket, else 0; see file_sock. */
static __always_inline u64 socket_key(struct socket *so, u64 ino, u64 *sk_out, u16 *tcp)
{
	if (so->type != SOCK_STREAM)
		return 0;
	/* A direct load (no helper call); announce() is a static subprogram, verified with the
	 * caller's register types, so it may take the pointer as it is. */
	u64 skv = (u64)so->sk;
	if (!skv)
		return 0;
	struct sock *sk = KCAST(struct sock, skv);
	u16 fam = sk->__sk_common.skc_family;
	if (fam == AF_UNIX) {
		/* The server's end of a connection to a listening socket carries the listener's
		 * address, a client's end is unbound with a bound peer (the traced process connected
		 * out: DF_OUTGOING); socketpairs (both ends unbound) are not database traffic. */
		struct unix_sock *us = KCAST(struct unix_sock, sk);
		if (!us->addr) {
			struct sock *pk = us->peer;
			if (!pk || !KCAST(struct unix_sock, pk)->addr)
				return 0;
		}
		*tcp = 0;
	} else if ((fam == AF_INET || fam == AF_INET6) && sk->sk_protocol == IPPROTO_TCP) {
		*tcp = 1;
	} else {
		return 0;
	}
	*sk_out = skv;
	return ino;
}

static __always_inline void read_unix_path(struct sock *sk, u16 *len, char *path)
{
	struct unix_sock *us = (struct unix_sock *)sk;
	struct unix_address *a = BPF_CORE_READ(us, addr);
	if (!a)
		return;
	int l = BPF_CORE_READ(a, len);
	if (l > 2)
		*len = l - 2 > 108 ? 108 : l - 2;
	bpf_probe_read_kernel(path, 108, (void *)a + bpf_core_field_offset(struct unix_address, name) + 2);
}

static __always_inline void fill_ip(struct sock *sk, struct open_rec *r)
{
	u16 fam = BPF_CORE_READ(sk, __sk_common.skc_family);
	r->lfam = fam;
	r->rfam = fam;
	r->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	r->rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (fam == AF_INET) {
		u32 l = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(r->laddr, &l, 4);
		__builtin_memcpy(r->raddr, &d, 4);
	} else {
		BPF_CORE_READ_INTO(&r->laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&r->raddr, sk, __sk_common.skc_v6_daddr);
	}
}

/* Emits an Open record for socket `sock` (struct sock at `skp`); 0 when written. */
static __noinline int announce(u64 sock, u64 skp, u32 how)
{
	u32 z = 0;
	struct open_rec *r = bpf_map_lookup_elem(&open_scratch, &z);
	if (!r)
		return -1;
	struct sock *sk = (struct sock *)skp;
	__builtin_memset(r, 0, sizeof(*r));
	r->h.kind = DK_OPEN;
	r->h.flags = how & (DF_ACCEPTED | DF_OUTGOING);
	r->h.pid = bpf_get_current_pid_tgid() >> 32;
	r->h.ts = bpf_ktime_get_ns();
	r->h.sock = sock;
	u16 fam = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (fam == AF_UNIX) {
		r->lfam = AF_UNIX;
		r->rfam = AF_UNIX;
		/* Unbound with a bound peer: the client's end, whatever was seen of its connect. */
		if (!BPF_CORE_READ((struct unix_sock *)sk, addr))
			r->h.flags |= DF_OUTGOING;
		read_unix_path(sk, &r->lpath_len, r->lpath);
		struct sock *peer = BPF_CORE_READ((struct unix_sock *)sk, peer);
		if (peer)
			read_unix_path(peer, &r->rpath_len, r->rpath);
		struct pid *pp = BPF_CORE_READ(sk, sk_peer_pid);
		if (pp) {
			r->peer_pid = BPF_CORE_READ(pp, numbers[0].nr);
			r->h.flags |= DF_PEER_PID;
		}
	} else {
		fill_ip(sk, r);
	}
	if (bpf_ringbuf_output(&ring, r, sizeof(*r), wake_flags(sizeof(*r), 0))) {
		struct counters *c = ctrs();
		if (c)
			c->lost_opens++;
		return -1;
	}
	return 0;
}

/* Writes the data record of header `h` with its `h->nbytes` bytes read from `ubuf` straight into
 * a ring reservation of `cap` bytes (a constant: bpf_ringbuf_reserve takes no other), the
 * header stored in place: one copy of the bytes, and three helper calls where the dynptr path
 * (bpf_ringbuf_reserve_dynptr, bpf_probe_read_user_dynptr, bpf_dynptr_write, submit) made
 * four, each with its own checks. The bytes past `nbytes` are padding (user space reads
 * `nbytes`). 0 when written, 1 when the bytes could not be read (nothing written), -1 when
 * the ring had no room. */
static __always_inline int emit_class(struct hdr *h, u64 ubuf, const u32 cap)
{
	u32 n = h->nbytes;
	struct data_rec *r = bpf_ringbuf_reserve(&ring, cap, 0);
	if (!r)
		return -1;
	/* The caller checked n <= cap - sizeof(hdr); the verifier needs to see it here. */
	asm volatile("" : "+r"(n));
	if (n > cap - sizeof(struct hdr) || bpf_probe_read_user(r->data, n, (void *)ubuf)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return 1;
	}
	r->h = *h;
	bpf_ringbuf_submit(r, wake_flags(cap, 1));
	return 0;
}

/* The size classes of the reservations: header plus bytes, rounded up to a power of two from
 * 128 (at most half of a record is padding), the largest holding COPY_MAX bytes. */
static __always_inline int emit_direct(struct hdr *h, u64 ubuf)
{
	u32 n = h->nbytes + sizeof(struct hdr);
	if (n <= 128)
		return emit_class(h, ubuf, 128);
	if (n <= 256)
		return emit_class(h, ubuf, 256);
	if (n <= 512)
		return emit_class(h, ubuf, 512);
	if (n <= 1024)
		return emit_class(h, ubuf, 1024);
	if (n <= 2048)
		return emit_class(h, ubuf, 2048);
	if (n <= 4096)
		return emit_class(h, ubuf, 4096);
	if (n <= 8192)
		return emit_class(h, ubuf, 8192);
	return emit_class(h, ubuf, sizeof(struct data_rec));
}

/* The same through the per-CPU scratch record (a read that failed: then the record carries no
 * bytes, an exact gap). */
static __always_inline int emit_copied(struct hdr *h, u64 ubuf)
{
	u32 z = 0;
	struct data_rec *r = bpf_map_lookup_elem(&scratch, &z);
	if (!r)
		return -1;
	u32 n = h->nbytes;
	/* The bound was checked by the caller; the compiler may drop a second check, but the
	 * verifier needs one here. */
	asm volatile("" : "+r"(n));
	if (n > COPY_MAX)
		n = COPY_MAX;
	if (n && bpf_probe_read_user(r->data, n, (void *)ubuf))
		n = 0;
	h->nbytes = n;
	r->h = *h;
	u64 size = sizeof(struct hdr) + n;
	if (size > sizeof(*r))
		size = sizeof(*r);
	return bpf_ringbuf_output(&ring, r, size, wake_flags(size, 0)) ? -1 : 0;
}

/* `flags` and the process id `pid` as one argument (BPF functions take at most five). */
#define FLAGS_PID(flags, pid) ((u64)(flags) | (u64)(pid) << 16)

/* One data record: `n` bytes copied from user memory at `ubuf`, `len` >= n bytes of stream;
 * `n_fp` = n | FLAGS_PID(flags, pid) << 16, n <= COPY_MAX (the caller's pid, known since
 * is_traced: one bpf_get_current_pid_tgid call per record less). */
__noinline int emit_chunk(u64 sock, u64 ubuf, u64 off, u64 n_fp, u64 len)
{
	u32 n = n_fp & 0xffff;
	struct counters *c = ctrs();
	if (!c)
		return -1;
	if (n > COPY_MAX)
		n = COPY_MAX;
	struct hdr h = {
		.kind = DK_DATA,
		.flags = n_fp >> 16,
		.pid = n_fp >> 32,
		.ts = bpf_ktime_get_ns(),
		.sock = sock,
		.offset = off,
		.len = len,
		.nbytes = n,
	};
	int rc = 1;
	u32 z = 0;
	struct config *cf = bpf_map_lookup_elem(&cfg, &z);
	if (n && cf && !cf->copy_twice)
		rc = emit_direct(&h, ubuf);
	if (rc > 0)
		rc = emit_copied(&h, ubuf);
	if (rc) {
		c->lost_records++;
		c->lost_bytes += len;
		return -1;
	}
	if (len > h.nbytes) {
		c->truncated_records++;
		c->truncated_bytes += len - h.nbytes;
	}
	return 0;
}

static __always_inline struct sock_state *state_of(u64 sock)
{
	struct sock_state *st = bpf_map_lookup_elem(&socks, &sock);
	if (st)
		return st;
	struct sock_state fresh = {};
	bpf_map_update_elem(&socks, &sock, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&socks, &sock);
}

/* Reserves `len` bytes of the stream (sock, dir), announcing the socket first if needed;
 * returns the offset of the first byte. */
static __always_inline u64 reserve(u64 sock, u64 sk, u32 inbound, u64 len, int *ok)
{
	struct sock_state *st = state_of(sock);
	*ok = st != 0;
	if (!st)
		return 0;
	if (!st->announced &&
	    announce(sock, sk, (st->accepted ? DF_ACCEPTED : 0) | (st->outgoing ? DF_OUTGOING : 0)) == 0)
		st->announced = 1;
	return __sync_fetch_and_add(&st->off[inbound ? 1 : 0], len);
}

static __always_inline void emit_buf(u64 sock, u64 sk, u64 fp, u64 ubuf, u64 len)
{
	int ok;
	u64 off = reserve(sock, sk, fp & DF_INBOUND, len, &ok);
	if (!ok)
		return;
	for (int i = 0; i < MAX_CHUNKS; i++) {
		u64 n = len > COPY_MAX ? COPY_MAX : len;
		u64 rec_len = (i == MAX_CHUNKS - 1) ? len : n;
		emit_chunk(sock, ubuf, off, n | fp << 16, rec_len);
		len -= rec_len;
		if (!len)
			break;
		ubuf += n;
		off += n;
	}
}

static __always_inline void emit_iov(u64 sock, u64 sk, u64 fp, u64 iovp, u32 vlen, u64 len)
{
	int ok;
	u64 off = reserve(sock, sk, fp & DF_INBOUND, len, &ok);
	if (!ok)
		return;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= vlen || !len)
			break;
		struct iovec v = {};
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(iovp + i * sizeof(v))))
			break;
		u64 seg = v.iov_len < len ? v.iov_len : len;
		if (!seg)
			continue;
		emit_chunk(sock, (u64)v.iov_base, off, (seg > COPY_MAX ? COPY_MAX : seg) | fp << 16, seg);
		off += seg;
		len -= seg;
	}
	if (len) {
		struct counters *c = ctrs();
		if (c)
			c->iov_gaps++;
		emit_chunk(sock, 0, off, fp << 16, len);
	}
}

static __always_inline int op_of(long id)
{
	switch (id) {
	case 0: return DOP_READ;
	case 1: return DOP_WRITE;
	case 3: return DOP_CLOSE;
	case 42: return DOP_CONNECT;
	case 19: return DOP_READV;
	case 20: return DOP_WRITEV;
	case 43: return DOP_ACCEPT;
	case 44: return DOP_WRITE;   /* sendto */
	case 45: return DOP_READ;    /* recvfrom */
	case 46: return DOP_SENDMSG;
	case 47: return DOP_RECVMSG;
	case 288: return DOP_ACCEPT; /* accept4 */
	}
	return 0;
}

struct file___old {
	atomic_long_t f_count;
} __attribute__((preserve_access_index));

/* Whether `f` has one reference (file_ref_t counts from 0 since 6.13; f_count from 1 before). */
static __always_inline int last_ref(struct file *f)
{
	if (bpf_core_field_exists(f->f_ref))
		return BPF_CORE_READ(f, f_ref.refcnt.counter) == 0;
	return BPF_CORE_READ((struct file___old *)f, f_count.counter) == 1;
}

static __always_inline void close_sock(u64 sock, u32 pid);

static __always_inline void on_close(u32 fd)
{
	struct file *f = fd_file(fd);
	u64 sk = 0;
	u16 tcp = 0;
	u64 sock = file_sock(f, &sk, &tcp);
	if (!sock)
		return;
	/* Another reference (a forked child, a dup) keeps the connection open. */
	if (!last_ref(f))
		return;
	close_sock(sock, bpf_get_current_pid_tgid() >> 32);
}

/* The end of stream `sock` (of process `pid`, 0 if not known): a Close record with its final
 * offsets, and its state dropped. */
static __always_inline void close_sock(u64 sock, u32 pid)
{
	struct sock_state *st = bpf_map_lookup_elem(&socks, &sock);
	if (!st)
		return;
	if (st->announced) {
		/* The final offsets let user space see a loss at the very end as a gap. */
		struct hdr h = {};
		h.kind = DK_CLOSE;
		h.pid = pid;
		h.ts = bpf_ktime_get_ns();
		h.sock = sock;
		h.offset = st->off[0];
		h.len = st->off[1];
		if (bpf_ringbuf_output(&ring, &h, sizeof(h), wake_flags(sizeof(h), 0))) {
			u32 z = 0;
			bpf_map_update_elem(&lost_closes, &sock, st->off, BPF_ANY);
			u64 *pending = bpf_map_lookup_elem(&lost_closes_pending, &z);
			if (pending)
				__sync_lock_test_and_set(pending, 1);
		}
	}
	bpf_map_delete_elem(&socks, &sock);
}

/* Inside an SSL call: the socket belongs to the SSL* of the call; ciphertext is not data. */
static __always_inline int inside_ssl(struct ssl_ctx *x, u32 pid, u64 sock, u64 sk)
{
	if (!x->depth)
		return 0;
	x->sock = sock;
	x->sk = sk;
	struct ssl_key k = {.ssl = x->ssl, .tgid = pid};
	struct sock_ref v = {.sock = sock, .sk = sk};
	bpf_map_update_elem(&ssl_socks, &k, &v, BPF_ANY);
	return 1;
}

/* Only close(2) needs the entry: at its exit the fd is gone. Every other call is traced at its
 * exit, where the registers still hold its arguments (pt_regs di/si/dx are not written by the
 * kernel): one program run per call instead of two, and none of the per-thread state. */
SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	if (id != 3 || !is_traced())
		return 0;
	on_close(regs->di);
	return 0;
}

/* The same on the classic per-syscall tracepoints (syscalls:sys_enter_close, and below the
 * sys_exit_* of the traced calls; the tracer attaches these when tracefs has them, the tp_btf
 * pair otherwise): the kernel runs them only for those calls, where the raw sys_enter/sys_exit
 * tracepoints run a program for every system call of every process on the machine. Layouts
 * from events/syscalls/sys_{enter_close,exit_read}/format. */
struct sc_enter_close {
	u64 common;
	int nr;
	u64 fd;
};

struct sc_exit {
	u64 common;
	int nr;
	long ret;
};

SEC("tracepoint")
int tp_enter_close(struct sc_enter_close *ctx)
{
	if (!is_traced())
		return 0;
	on_close(ctx->fd);
	return 0;
}

static __always_inline void on_accepted(u32 fd)
{
	u64 sk = 0;
	u16 tcp = 0;
	u64 sock = file_sock(fd_file(fd), &sk, &tcp);
	if (!sock)
		return;
	struct sock_state fresh = {.accepted = 1};
	bpf_map_update_elem(&socks, &sock, &fresh, BPF_ANY);
	if (tcp && !tcp_plaintext())
		return; /* announced at its first TLS plaintext */
	struct sock_state *st = bpf_map_lookup_elem(&socks, &sock);
	if (st && announce(sock, sk, DF_ACCEPTED) == 0)
		st->announced = 1;
}

/* A connect(2) of the traced process succeeded (or is under way: EINPROGRESS): the process
 * is the client of this connection. */
static __always_inline void on_connected(u32 fd)
{
	u64 sk = 0;
	u16 tcp = 0;
	u64 sock = file_sock(fd_file(fd), &sk, &tcp);
	if (!sock)
		return;
	struct sock_state fresh = {.accepted = 1, .outgoing = 1};
	bpf_map_update_elem(&socks, &sock, &fresh, BPF_ANY);
	if (tcp && !tcp_plaintext())
		return; /* announced at its first TLS plaintext */
	struct sock_state *st = bpf_map_lookup_elem(&socks, &sock);
	if (st && announce(sock, sk, DF_ACCEPTED | DF_OUTGOING) == 0)
		st->announced = 1;
}

static __always_inline int data_call(struct task_struct *task, struct pt_regs *regs, int op,
				     long ret, u32 pid, u64 sock, u64 sk, u16 tcp);

/* The exit of a traced call `op` (not close) of traced process `pid`, its arguments in `regs`;
 * `task` is the current task (one bpf_get_current_task_btf call per run). */
static __always_inline int sys_exit(struct task_struct *task, struct pt_regs *regs, int op,
				    long ret, u32 pid)
{
	u32 fd = regs->di;
	/* Accepts and connects need no entry record: one blocked since before start still counts. */
	if (op == DOP_ACCEPT) {
		if (ret >= 0)
			on_accepted(ret);
		return 0;
	}
	if (op == DOP_CONNECT) {
		if (ret == 0 || ret == -EINPROGRESS)
			on_connected(fd);
		return 0;
	}
	u64 sk = 0;
	u16 tcp = 0;
	u64 sock = file_sock(task_fd_file(task, fd), &sk, &tcp);
	return data_call(task, regs, op, ret, pid, sock, sk, tcp);
}

/* A traced process's call `op` on socket `sock` (its struct sock `sk`, `tcp` or AF_UNIX; 0: not
 * a traced socket) moved `ret` bytes (or failed); its arguments are in `regs`. */
static __always_inline int data_call(struct task_struct *task, struct pt_regs *regs, int op,
				     long ret, u32 pid, u64 sock, u64 sk, u16 tcp)
{
	/* Inside an SSL call (a thread that never made one has no state) the socket is bound to the
	 * SSL* whatever the call returned, and its bytes are ciphertext, not data. Outside one, a
	 * call that moved no bytes (EAGAIN before poll) costs no more than this. */
	struct tstate *ts = ssl_entered ? task_tstate(task, 0) : 0;
	int in_ssl = ts && ts->x.depth;
	if (ret <= 0 && !in_ssl)
		return 0;
	if (!sock)
		return 0;
	if (in_ssl && inside_ssl(&ts->x, pid, sock, sk))
		return 0;
	if (ret <= 0 || (tcp && !tcp_plaintext()))
		return 0;
	u64 buf = regs->si;
	switch (op) {
	case DOP_READ:
		emit_buf(sock, sk, FLAGS_PID(DF_INBOUND, pid), buf, ret);
		break;
	case DOP_WRITE:
		emit_buf(sock, sk, FLAGS_PID(0, pid), buf, ret);
		break;
	case DOP_READV:
		emit_iov(sock, sk, FLAGS_PID(DF_INBOUND, pid), buf, regs->dx, ret);
		break;
	case DOP_WRITEV:
		emit_iov(sock, sk, FLAGS_PID(0, pid), buf, regs->dx, ret);
		break;
	case DOP_RECVMSG:
	case DOP_SENDMSG: {
		struct user_msghdr m = {};
		if (bpf_probe_read_user(&m, sizeof(m), (void *)buf))
			break;
		emit_iov(sock, sk, FLAGS_PID(op == DOP_RECVMSG ? DF_INBOUND : 0, pid), (u64)m.msg_iov,
			 m.msg_iovlen, ret);
		break;
	}
	}
	return 0;
}

/* The current task when the exit of system call `nr` is one to trace (not close) in a traced
 * process, with its operation and process id; 0 otherwise. The process id is a direct load
 * from the task the exit needs anyway: one helper call (bpf_get_current_pid_tgid) less. */
static __always_inline struct task_struct *traced_exit(long nr, int *op, u32 *pid)
{
	*op = op_of(nr);
	if (!*op || *op == DOP_CLOSE)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	*pid = task->tgid;
	return tgid_traced(*pid) ? task : 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	int op;
	u32 pid;
	struct task_struct *task = traced_exit(regs->orig_ax, &op, &pid);
	if (!task)
		return 0;
	return sys_exit(task, regs, op, ret, pid);
}

/* Where a task's user registers sit above its kernel stack's base (task->stack): the same for
 * every task of a kernel (THREAD_SIZE, the padding, sizeof(struct pt_regs)), learnt from the
 * first bpf_task_pt_regs answer; 0 until then. */
u64 regs_off = 0;

/* The user registers of `task` (the current one) at the exit of system call `nr`: found from the
 * stack base and regs_off by direct loads, a helper call per run less; checked by the syscall
 * number they hold (orig_ax), and asked of bpf_task_pt_regs when that does not match. */
static __always_inline struct pt_regs *asked_regs(struct task_struct *task);

static __always_inline struct pt_regs *user_regs(struct task_struct *task, long nr)
{
	u64 off = regs_off;
	if (off) {
		struct pt_regs *r = KCAST(struct pt_regs, (u64)task->stack + off);
		if (r->orig_ax == nr)
			return r;
	}
	return asked_regs(task);
}

/* The user registers of `task` as bpf_task_pt_regs gives them, and regs_off learnt from them. */
static __always_inline struct pt_regs *asked_regs(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	u64 base = (u64)task->stack;
	if (base && (u64)regs > base)
		regs_off = (u64)regs - base;
	return regs;
}

/* Attached to syscalls:sys_exit_{read,write,readv,writev,connect,accept,accept4,sendto,recvfrom,
 * sendmsg,recvmsg}: the arguments come from the task's user registers. */
SEC("tracepoint")
int tp_sys_exit(struct sc_exit *ctx)
{
	int op;
	u32 pid;
	struct task_struct *task = traced_exit(ctx->nr, &op, &pid);
	if (!task)
		return 0;
	struct pt_regs *regs = user_regs(task, ctx->nr);
	if (!regs)
		return 0;
	return sys_exit(task, regs, op, ctx->ret, pid);
}

/* The current task's user registers, found as user_regs does but without a system call number
 * to check them by (bpf_task_pt_regs teaches the offset, the same for every task). */
static __always_inline struct pt_regs *cur_user_regs(struct task_struct *task)
{
	u64 off = regs_off;
	if (off)
		return KCAST(struct pt_regs, (u64)task->stack + off);
	return asked_regs(task);
}

/* A receive (`inbound`) or send of `ret` bytes on socket `skp` (sock:sock_recv_length,
 * sock:sock_send_length): the kernel runs these only for socket receives and sends, and no
 * system call of any process is put on the tracing slow path, where a syscall tracepoint puts
 * every call of every process there (bench/ebpf_syscalls.py: a process that is not traced paid
 * 733 ns per loop of six calls more under the syscall tracepoints, 231 ns under these). The
 * system call (its number in the user registers, which
 * also hold its arguments) says where the bytes are; calls that are not traced (sendfile,
 * recvmmsg, io_uring's workers) and peeks are left out. */
static __always_inline int sock_data(struct sock *skp, int ret, int flags, int inbound)
{
	struct task_struct *task = bpf_get_current_task_btf();
	u32 pid = task->tgid;
	if (!tgid_traced(pid) || (flags & MSG_PEEK))
		return 0;
	/* A call that moved no bytes (EAGAIN before poll: one per query of MariaDB) matters only
	 * inside an SSL call (data_call), and no thread is in one before any entered one. */
	if (ret <= 0 && !ssl_entered)
		return 0;
	struct pt_regs *regs = cur_user_regs(task);
	if (!regs)
		return 0;
	int op = op_of(regs->orig_ax);
	if (inbound ? op != DOP_READ && op != DOP_READV && op != DOP_RECVMSG
		    : op != DOP_WRITE && op != DOP_WRITEV && op != DOP_SENDMSG)
		return 0;
	u64 sk = 0;
	u16 tcp = 0;
	u64 sock = sk_sock(skp, &sk, &tcp);
	return data_call(task, regs, op, ret, pid, sock, sk, tcp);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
	return sock_data(sk, ret, flags, 1);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
	return sock_data(sk, ret, 0, 0);
}

#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9

/* With the socket tracepoints no system call is traced, close(2) neither: a TCP stream ends
 * where its connection leaves ESTABLISHED or CLOSE_WAIT for good (the owner's last close sends
 * its FIN, or a reset ends it), seen here while the socket still has its inode; the kernel
 * runs this at TCP state changes only (a shutdown for writing also ends the stream here; database
 * servers do not make one). Unix streams end where their process no longer holds their socket
 * (tracer.rs reads its descriptors every second), and every stream of a process at its exit. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_tcp_state, const struct sock *skp, const int old, const int new)
{
	if ((old != TCP_ESTABLISHED && old != TCP_CLOSE_WAIT) ||
	    (new != TCP_FIN_WAIT1 && new != TCP_LAST_ACK && new != TCP_CLOSE))
		return 0;
	if (skp->sk_protocol != IPPROTO_TCP)
		return 0;
	struct socket *sop = skp->sk_socket;
	if (!sop)
		return 0;
	close_sock(socket_ino(sop), 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 ptgid = parent->tgid;
	u32 ctgid = child->tgid;
	if (ptgid == ctgid || !tgid_traced(ptgid))
		return 0;
	mark_traced(ctgid, 1);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p, bool group_dead)
{
	u32 tgid = p->tgid;
	if (!group_dead || !tgid_traced(tgid))
		return 0;
	mark_traced(tgid, 0);
	struct hdr h = {};
	h.kind = DK_EXIT;
	h.pid = tgid;
	h.ts = bpf_ktime_get_ns();
	bpf_ringbuf_output(&ring, &h, sizeof(h), wake_flags(sizeof(h), 0));
	return 0;
}

/* User space's way to add (or remove) a traced process: BPF_PROG_RUN with {tgid, set} as
 * the context; returns 0 when done. */
struct traced_arg {
	u32 tgid;
	u32 set;
};

SEC("syscall")
int set_traced(struct traced_arg *a)
{
	return mark_traced(a->tgid, a->set);
}

/* ---- OpenSSL uprobes ---- */

static __always_inline int ssl_enter(u64 ssl, u32 op, u64 buf, u64 exptr)
{
	if (!is_traced())
		return 0;
	if (!ssl_entered)
		ssl_entered = 1;
	struct tstate *ts = tstate(1);
	if (!ts)
		return 0;
	struct ssl_ctx *x = &ts->x;
	if (x->depth == 0) {
		x->ssl = ssl;
		x->sock = 0;
		x->op = op;
		x->buf = buf;
		x->exptr = exptr;
	}
	if (x->depth < 64)
		x->depth++;
	return 0;
}

static __always_inline int ssl_exit(long ret)
{
	u64 id = bpf_get_current_pid_tgid();
	struct tstate *ts = tstate(0);
	if (!ts || !ts->x.depth)
		return 0;
	struct ssl_ctx *x = &ts->x;
	if (--x->depth)
		return 0;
	u32 op = x->op;
	x->op = 0;
	if (!op || ret <= 0)
		return 0;
	u64 n = ret;
	if (x->exptr) {
		n = 0;
		bpf_probe_read_user(&n, sizeof(n), (void *)x->exptr);
	}
	u64 sock = x->sock, sk = x->sk;
	if (!sock) {
		struct ssl_key k = {.ssl = x->ssl, .tgid = id >> 32};
		struct sock_ref *r = bpf_map_lookup_elem(&ssl_socks, &k);
		if (!r)
			return 0;
		sock = r->sock;
		sk = r->sk;
	}
	if (n)
		emit_buf(sock, sk, FLAGS_PID(DF_TLS | (op == DOP_READ ? DF_INBOUND : 0), id >> 32), x->buf,
			 n);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(ssl_read_enter, void *ssl, void *buf, int num)
{
	return ssl_enter((u64)ssl, DOP_READ, (u64)buf, 0);
}

SEC("uprobe")
int BPF_KPROBE(ssl_write_enter, void *ssl, void *buf, int num)
{
	return ssl_enter((u64)ssl, DOP_WRITE, (u64)buf, 0);
}

SEC("uprobe")
int BPF_KPROBE(ssl_read_ex_enter, void *ssl, void *buf, size_t num, size_t *done)
{
	return ssl_enter((u64)ssl, DOP_READ, (u64)buf, (u64)done);
}

SEC("uprobe")
int BPF_KPROBE(ssl_write_ex_enter, void *ssl, void *buf, size_t num, size_t *done)
{
	return ssl_enter((u64)ssl, DOP_WRITE, (u64)buf, (u64)done);
}

/* SSL_do_handshake, SSL_accept, SSL_connect, SSL_shutdown: only "inside an SSL call". */
SEC("uprobe")
int BPF_KPROBE(ssl_other_enter, void *ssl)
{
	return ssl_enter((u64)ssl, 0, 0, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(ssl_exit_ret, int ret)
{
	return ssl_exit(ret);
}

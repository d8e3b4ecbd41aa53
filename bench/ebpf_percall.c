// A fixed workload for the eBPF source's cost per traced call (bench/ebpf-percall.sh).
//   ebpf_percall serve PATH RESP     echo-like server on Unix socket PATH: for each request read
//                                    (one read(2)), answers RESP bytes with one write(2)
//   ebpf_percall client PATH N REQ RESP
//                                    N round trips of REQ bytes out, RESP bytes back; the
//                                    client's own calls are sendmmsg/recvmmsg, which the tracer
//                                    does not attach to, so it causes no program runs
//                                    (EBPF_PERCALL_RW=1: read/write, untraced program runs).
// Build: cc -O2 -o ebpf_percall bench/ebpf_percall.c
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

static void die(const char *m)
{
	perror(m);
	exit(1);
}

static void addr_of(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	strncpy(a->sun_path, path, sizeof(a->sun_path) - 1);
}

static void serve(const char *path, size_t resp)
{
	struct sockaddr_un a;
	addr_of(&a, path);
	unlink(path);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 16))
		die("listen");
	char *out = malloc(resp), buf[65536];
	memset(out, 'r', resp);
	for (;;) {
		int c = accept(l, 0, 0);
		if (c < 0)
			die("accept");
		for (;;) {
			ssize_t n = read(c, buf, sizeof(buf));
			if (n <= 0)
				break;
			if (write(c, out, resp) != (ssize_t)resp)
				break;
		}
		close(c);
	}
}

/* EBPF_PERCALL_RW=1: the client uses read(2)/write(2), traced calls of an untraced process. */
static int plain_rw;

static ssize_t one(int fd, int out, char *p, size_t n)
{
	if (plain_rw)
		return out ? write(fd, p, n) : read(fd, p, n);
	struct iovec v = {p, n};
	struct mmsghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_hdr.msg_iov = &v;
	m.msg_hdr.msg_iovlen = 1;
	int r = out ? sendmmsg(fd, &m, 1, 0) : recvmmsg(fd, &m, 1, 0, 0);
	return r == 1 ? (ssize_t)m.msg_len : -1;
}

static int client(const char *path, long n, size_t req, size_t resp)
{
	struct sockaddr_un a;
	addr_of(&a, path);
	int c = socket(AF_UNIX, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	char *q = malloc(req), buf[65536];
	memset(q, 'q', req);
	for (long i = 0; i < n; i++) {
		if (one(c, 1, q, req) != (ssize_t)req)
			die("send");
		size_t got = 0;
		while (got < resp) {
			ssize_t k = one(c, 0, buf, sizeof(buf));
			if (k <= 0)
				die("recv");
			got += k;
		}
	}
	close(c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "serve"))
		serve(argv[2], atol(argv[3]));
	plain_rw = getenv("EBPF_PERCALL_RW") && !strcmp(getenv("EBPF_PERCALL_RW"), "1");
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]));
	fprintf(stderr, "usage: %s serve PATH RESP | client PATH N REQ RESP\n", argv[0]);
	return 2;
}

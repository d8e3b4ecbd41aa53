//! Classic BPF socket filters, all written NETWORK-relative.
//!
//! A packet socket bound to "any" sees every device, each with its own link header (Ethernet,
//! none on a tun, 16 bytes of SLL-like cooked header on others...). Loads at `SKF_NET_OFF + k`
//! read byte `k` of the network header whatever came before it, and the ancillary loads
//! (`SKF_AD_OFF + SKF_AD_PROTOCOL/PKTTYPE/IFINDEX`) read the ethertype, packet type and device
//! from the skb, so one program works on every device.
//!
//! - [`servers_filter`]: TCP to/from server ports or addresses, with connection sampling and
//!   the loopback-duplicate rule, generated here.
//! - [`compile_expr`]: a tcpdump expression compiled by libpcap (loaded at run time) for raw
//!   IP and relocated to network-relative loads.
//! - [`and`]: the conjunction of two programs.
//! - [`run`]: an interpreter, for tests of the generated programs without a socket.

use std::net::{IpAddr, SocketAddr};

use crate::LiveError;

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter` (and libpcap's
/// `struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl Insn {
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
}

// Instruction classes and fields (linux/filter.h, linux/bpf_common.h).
pub const BPF_LD: u16 = 0x00;
pub const BPF_LDX: u16 = 0x01;
pub const BPF_ST: u16 = 0x02;
pub const BPF_STX: u16 = 0x03;
pub const BPF_ALU: u16 = 0x04;
pub const BPF_JMP: u16 = 0x05;
pub const BPF_RET: u16 = 0x06;
pub const BPF_MISC: u16 = 0x07;
pub const BPF_W: u16 = 0x00;
pub const BPF_H: u16 = 0x08;
pub const BPF_B: u16 = 0x10;
pub const BPF_IMM: u16 = 0x00;
pub const BPF_ABS: u16 = 0x20;
pub const BPF_IND: u16 = 0x40;
pub const BPF_MEM: u16 = 0x60;
pub const BPF_LEN: u16 = 0x80;
pub const BPF_MSH: u16 = 0xa0;
pub const BPF_ADD: u16 = 0x00;
pub const BPF_SUB: u16 = 0x10;
pub const BPF_MUL: u16 = 0x20;
pub const BPF_DIV: u16 = 0x30;
pub const BPF_OR: u16 = 0x40;
pub const BPF_AND: u16 = 0x50;
pub const BPF_LSH: u16 = 0x60;
pub const BPF_RSH: u16 = 0x70;
pub const BPF_NEG: u16 = 0x80;
pub const BPF_MOD: u16 = 0x90;
pub const BPF_XOR: u16 = 0xa0;
pub const BPF_JA: u16 = 0x00;
pub const BPF_JEQ: u16 = 0x10;
pub const BPF_JGT: u16 = 0x20;
pub const BPF_JGE: u16 = 0x30;
pub const BPF_JSET: u16 = 0x40;
pub const BPF_K: u16 = 0x00;
pub const BPF_X: u16 = 0x08;
pub const BPF_A: u16 = 0x10;
pub const BPF_TAX: u16 = 0x00;
pub const BPF_TXA: u16 = 0x80;
/// The kernel's limit on a classic program's length.
pub const BPF_MAXINSNS: usize = 4096;
/// `BPF_MEMWORDS`: scratch memory cells.
const MEMWORDS: usize = 16;

/// `SKF_AD_OFF`: base of ancillary loads.
pub const SKF_AD_OFF: i32 = libc::SKF_AD_OFF;
/// `SKF_NET_OFF`: base of network-header-relative loads.
pub const SKF_NET_OFF: i32 = libc::SKF_NET_OFF;
/// `SKF_LL_OFF`: base of link-header-relative loads.
pub const SKF_LL_OFF: i32 = libc::SKF_LL_OFF;
pub const SKF_AD_PROTOCOL: i32 = libc::SKF_AD_PROTOCOL;
pub const SKF_AD_PKTTYPE: i32 = libc::SKF_AD_PKTTYPE;
pub const SKF_AD_IFINDEX: i32 = libc::SKF_AD_IFINDEX;

/// Snap length returned for an accepted packet: every byte.
pub const ACCEPT: u32 = 0x40000;
/// `PACKET_OUTGOING` (linux/if_packet.h).
pub const PACKET_OUTGOING: u8 = libc::PACKET_OUTGOING;
const ETH_P_IP: u32 = 0x0800;
const ETH_P_IPV6: u32 = 0x86dd;
const IPPROTO_TCP: u32 = 6;

const fn net(k: u32) -> u32 {
    (SKF_NET_OFF as u32).wrapping_add(k)
}
const fn ad(k: i32) -> u32 {
    (SKF_AD_OFF + k) as u32
}

// ---------------------------------------------------------------- a tiny assembler

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Label(usize);

enum Op {
    Stmt(Insn),
    /// Conditional jump (`code` is BPF_JMP|op|BPF_K) to label `t` if true, `f` if false.
    Cond {
        code: u16,
        k: u32,
        t: Label,
        f: Label,
    },
    Ja(Label),
    Here(Label),
}

/// Forward-only assembler. A conditional jump whose target lies more than 255 instructions
/// ahead becomes `jxx k, 0, 1; ja T; ja F` (ja takes a 32-bit offset), repeated to a fixed
/// point, so any program layout assembles.
#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }
    fn here(&mut self, l: Label) {
        self.ops.push(Op::Here(l));
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.ops.push(Op::Stmt(Insn::stmt(code, k)));
    }
    fn jeq(&mut self, k: u32, t: Label, f: Label) {
        self.ops.push(Op::Cond {
            code: BPF_JMP | BPF_JEQ | BPF_K,
            k,
            t,
            f,
        });
    }
    fn jset(&mut self, k: u32, t: Label, f: Label) {
        self.ops.push(Op::Cond {
            code: BPF_JMP | BPF_JSET | BPF_K,
            k,
            t,
            f,
        });
    }
    fn ja(&mut self, l: Label) {
        self.ops.push(Op::Ja(l));
    }

    fn finish(self) -> Vec<Insn> {
        let mut wide = vec![false; self.ops.len()];
        let mut at = vec![0usize; self.labels];
        let mut op_pos = vec![0usize; self.ops.len()];
        loop {
            // Lay out with the current widths, then widen every jump that does not reach.
            let mut pos = 0;
            for (i, op) in self.ops.iter().enumerate() {
                op_pos[i] = pos;
                match op {
                    Op::Here(l) => at[l.0] = pos,
                    Op::Cond { .. } if wide[i] => pos += 3,
                    _ => pos += 1,
                }
            }
            let mut changed = false;
            for (i, op) in self.ops.iter().enumerate() {
                if let Op::Cond { t, f, .. } = op {
                    let next = op_pos[i] + 1;
                    if !wide[i] && (at[t.0] - next > 255 || at[f.0] - next > 255) {
                        wide[i] = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut out = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let pos = out.len();
            match *op {
                Op::Here(_) => {}
                Op::Stmt(ins) => out.push(ins),
                Op::Ja(l) => out.push(Insn::stmt(BPF_JMP | BPF_JA, (at[l.0] - (pos + 1)) as u32)),
                Op::Cond { code, k, t, f } if wide[i] => {
                    out.push(Insn::jump(code, k, 0, 1));
                    out.push(Insn::stmt(BPF_JMP | BPF_JA, (at[t.0] - (pos + 2)) as u32));
                    out.push(Insn::stmt(BPF_JMP | BPF_JA, (at[f.0] - (pos + 3)) as u32));
                }
                Op::Cond { code, k, t, f } => {
                    out.push(Insn::jump(
                        code,
                        k,
                        (at[t.0] - (pos + 1)) as u8,
                        (at[f.0] - (pos + 1)) as u8,
                    ));
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------- the generated filter

/// What [`servers_filter`] accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// TCP server ports: accept TCP packets whose source or destination port is one of them.
    pub ports: Vec<u16>,
    /// Accept TCP packets to or from exactly this address and port (IPv4 or IPv6; an
    /// IPv4-mapped IPv6 address is matched as IPv4).
    pub servers: Vec<SocketAddr>,
    /// 1 (or 0) keeps everything; N > 1 keeps only connections whose CLIENT port is chosen by
    /// [`sample_keeps`] (the client port being the one opposite the matching server port or
    /// address). Ignored when both `ports` and `servers` are empty (nothing says which side is
    /// the client).
    pub sample: u32,
    /// Drop `PACKET_OUTGOING` packets of this device (the loopback: the kernel shows each
    /// loopback packet twice, outgoing and incoming).
    pub loopback_ifindex: Option<i32>,
}

/// Multiplier of the client-port hash (2^32 / golden ratio, Knuth's multiplicative hashing).
pub const SAMPLE_HASH_MUL: u32 = 0x9E37_79B1;

/// Whether `--sample n` keeps a connection whose client port is `client_port`: a
/// multiplicative hash of the port, modulo `n`, is 0. Not `port % n` as DBAs do by hand
/// (`tcp[1] & 7 == 2`): Linux gives `connect()` even local ports and `bind()` odd ones, so the
/// low bits of client ports are biased and `port % 2 == 0` would keep every ordinary client.
/// The kernel filter computes exactly this (32-bit multiply, shift, modulo).
pub fn sample_keeps(client_port: u16, n: u32) -> bool {
    n <= 1 || ((u32::from(client_port).wrapping_mul(SAMPLE_HASH_MUL) >> 16) % n) == 0
}

/// Builds the filter for `spec`: TCP over IPv4 or IPv6 (next header 6 directly after the fixed
/// 40-byte header; packets with IPv6 extension headers before TCP are not matched), to/from
/// the given ports or servers, sampled by client port, without the outgoing copy of loopback
/// packets. Accepted packets return [`ACCEPT`] (all bytes), others 0.
///
/// IPv4 non-first fragments of TCP carry no ports and are accepted (so reassembly can work);
/// the first fragment is judged by its ports like any packet. Empty `ports` and `servers`
/// accept all TCP.
pub fn servers_filter(spec: &FilterSpec) -> Vec<Insn> {
    let mut a = Asm::default();
    let accept = a.label();
    let reject = a.label();
    if let Some(lo) = spec.loopback_ifindex {
        let chk = a.label();
        let cont = a.label();
        a.stmt(BPF_LD | BPF_B | BPF_ABS, ad(SKF_AD_PKTTYPE));
        a.jeq(u32::from(PACKET_OUTGOING), chk, cont);
        a.here(chk);
        a.stmt(BPF_LD | BPF_W | BPF_ABS, ad(SKF_AD_IFINDEX));
        a.jeq(lo as u32, reject, cont);
        a.here(cont);
    }
    let (v4, v6, not4) = (a.label(), a.label(), a.label());
    a.stmt(BPF_LD | BPF_H | BPF_ABS, ad(SKF_AD_PROTOCOL));
    a.jeq(ETH_P_IP, v4, not4);
    a.here(not4);
    a.jeq(ETH_P_IPV6, v6, reject);

    // IPv4: protocol TCP; non-first fragments accepted; X = header length.
    let (tcp4, first4) = (a.label(), a.label());
    a.here(v4);
    a.stmt(BPF_LD | BPF_B | BPF_ABS, net(9));
    a.jeq(IPPROTO_TCP, tcp4, reject);
    a.here(tcp4);
    a.stmt(BPF_LD | BPF_H | BPF_ABS, net(6));
    a.jset(0x1fff, accept, first4);
    a.here(first4);
    a.stmt(BPF_LDX | BPF_B | BPF_MSH, net(0));
    ports_block(&mut a, spec, false, accept, reject);

    // IPv6: next header TCP; X = 40.
    let tcp6 = a.label();
    a.here(v6);
    a.stmt(BPF_LD | BPF_B | BPF_ABS, net(6));
    a.jeq(IPPROTO_TCP, tcp6, reject);
    a.here(tcp6);
    a.stmt(BPF_LDX | BPF_W | BPF_IMM, 40);
    ports_block(&mut a, spec, true, accept, reject);

    a.here(accept);
    a.stmt(BPF_RET | BPF_K, ACCEPT);
    a.here(reject);
    a.stmt(BPF_RET | BPF_K, 0);
    a.finish()
}

/// A program that accepts everything except the outgoing copy of packets on `ifindex` (the
/// loopback), to be combined with [`and`] when the user's own expression is the filter.
pub fn drop_outgoing(ifindex: i32) -> Vec<Insn> {
    vec![
        Insn::stmt(BPF_LD | BPF_B | BPF_ABS, ad(SKF_AD_PKTTYPE)),
        Insn::jump(BPF_JMP | BPF_JEQ | BPF_K, u32::from(PACKET_OUTGOING), 0, 2),
        Insn::stmt(BPF_LD | BPF_W | BPF_ABS, ad(SKF_AD_IFINDEX)),
        Insn::jump(BPF_JMP | BPF_JEQ | BPF_K, ifindex as u32, 1, 0),
        Insn::stmt(BPF_RET | BPF_K, ACCEPT),
        Insn::stmt(BPF_RET | BPF_K, 0),
    ]
}

/// A program accepting every packet (snap length [`ACCEPT`]).
pub fn accept_all() -> Vec<Insn> {
    vec![Insn::stmt(BPF_RET | BPF_K, ACCEPT)]
}

fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The port and address checks of one family, with X = offset of the TCP header from the
/// network header. Falls to `reject` when nothing matched.
fn ports_block(a: &mut Asm, spec: &FilterSpec, v6: bool, accept: Label, reject: Label) {
    let servers: Vec<(IpAddr, u16)> = spec
        .servers
        .iter()
        .map(|s| (canonical(s.ip()), s.port()))
        .filter(|(ip, _)| ip.is_ipv6() == v6)
        .collect();
    if spec.ports.is_empty() && spec.servers.is_empty() {
        a.ja(accept);
        return;
    }
    if !spec.ports.is_empty() {
        port_checks(a, &spec.ports, spec.sample, accept);
    }
    for (ip, port) in servers {
        server_check(a, ip, port, v6, spec.sample, accept);
    }
    a.ja(reject);
}

/// Loads the TCP source port (TCP header at X).
fn load_sport(a: &mut Asm) {
    a.stmt(BPF_LD | BPF_H | BPF_IND, net(0));
}

/// Loads the TCP destination port (TCP header at X).
fn load_dport(a: &mut Asm) {
    a.stmt(BPF_LD | BPF_H | BPF_IND, net(2));
}

/// Client port check: to `accept` when `sample_keeps(other, sample)`, else to `fail`.
fn sample_check(a: &mut Asm, sample: u32, accept: Label, other_is_dst: bool, fail: Label) {
    if sample <= 1 {
        a.ja(accept);
    } else {
        if other_is_dst {
            load_dport(a)
        } else {
            load_sport(a)
        }
        a.stmt(BPF_ALU | BPF_MUL | BPF_K, SAMPLE_HASH_MUL);
        a.stmt(BPF_ALU | BPF_RSH | BPF_K, 16);
        a.stmt(BPF_ALU | BPF_MOD | BPF_K, sample);
        a.jeq(0, accept, fail);
    }
}

/// Either port one of `ports` (the other one sampled); falls through when none matched.
fn port_checks(a: &mut Asm, ports: &[u16], sample: u32, accept: Label) {
    let (src_m, dst_chk, dst_m, done) = (a.label(), a.label(), a.label(), a.label());
    load_sport(a);
    for (i, &p) in ports.iter().enumerate() {
        let next = if i + 1 == ports.len() {
            dst_chk
        } else {
            a.label()
        };
        a.jeq(u32::from(p), src_m, next);
        if next != dst_chk {
            a.here(next);
        }
    }
    a.here(src_m);
    sample_check(a, sample, accept, true, dst_chk);
    a.here(dst_chk);
    load_dport(a);
    for (i, &p) in ports.iter().enumerate() {
        let next = if i + 1 == ports.len() {
            done
        } else {
            a.label()
        };
        a.jeq(u32::from(p), dst_m, next);
        if next != done {
            a.here(next);
        }
    }
    a.here(dst_m);
    sample_check(a, sample, accept, false, done);
    a.here(done);
}

/// The server `ip:port` on either side (the client port sampled); falls through when not.
fn server_check(a: &mut Asm, ip: IpAddr, port: u16, v6: bool, sample: u32, accept: Label) {
    let words: Vec<u32> = match ip {
        IpAddr::V4(v) => vec![u32::from(v)],
        IpAddr::V6(v) => v
            .octets()
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    // Source address field offset, destination address field offset.
    let (src_off, dst_off) = if v6 { (8, 24) } else { (12, 16) };
    let next_server = a.label();
    for (is_src, off) in [(true, src_off), (false, dst_off)] {
        let miss = if is_src { a.label() } else { next_server };
        for (i, w) in words.iter().enumerate() {
            let ok = a.label();
            a.stmt(BPF_LD | BPF_W | BPF_ABS, net(off + 4 * i as u32));
            a.jeq(*w, ok, miss);
            a.here(ok);
        }
        let hit = a.label();
        if is_src {
            load_sport(a)
        } else {
            load_dport(a)
        }
        a.jeq(u32::from(port), hit, miss);
        a.here(hit);
        // Server on the source side: the client port is the destination port.
        sample_check(a, sample, accept, is_src, miss);
        if is_src {
            a.here(miss);
        }
    }
    a.here(next_server);
}

// ---------------------------------------------------------------- libpcap expressions

/// `DLT_RAW` as libpcap numbers it on Linux.
const DLT_RAW: i32 = 12;

/// Compiles a tcpdump-style expression with libpcap (loaded at run time: `libpcap.so.0.8`,
/// `libpcap.so.1`, then `libpcap.so`) for raw IP, and relocates it to network-relative loads
/// so it works on every device (see [`relocate_to_net`]).
///
/// Expressions naming link-layer things (`ether host ...`, `vlan`) do not compile for raw IP;
/// libpcap's message is passed through.
pub fn compile_expr(expr: &str) -> Result<Vec<Insn>, LiveError> {
    match crate::sys::pcap_compile(expr, DLT_RAW, 262_144) {
        Ok(prog) if prog.is_empty() => Err(LiveError::Filter(format!(
            "filter expression '{expr}': libpcap returned an empty program"
        ))),
        Ok(mut prog) => {
            relocate_to_net(&mut prog);
            Ok(prog)
        }
        Err(crate::sys::PcapError::Missing(e)) => Err(LiveError::Filter(format!(
            "--filter needs libpcap at run time (apt-get install libpcap0.8): {e}"
        ))),
        Err(crate::sys::PcapError::Compile(e)) => Err(LiveError::Filter(format!(
            "filter expression '{expr}': {e}"
        ))),
    }
}

/// Turns a program written for a packet starting at the IP header (DLT_RAW) into one reading
/// the network header of any device: every packet load `ld[bhw] [k]`, `ld[bhw] [x + k]` and
/// `ldx 4*([k]&0xf)` gets `k += SKF_NET_OFF`. Loads that are already negative (ancillary or
/// already relocated) are left alone. `len` still means the whole packet including the link
/// header.
pub fn relocate_to_net(prog: &mut [Insn]) {
    for ins in prog {
        let class = ins.code & 0x07;
        let mode = ins.code & 0xe0;
        let size = ins.code & 0x18;
        let is_pkt_load = (class == BPF_LD && (mode == BPF_ABS || mode == BPF_IND))
            || (class == BPF_LDX && mode == BPF_MSH && size == BPF_B);
        if is_pkt_load && (ins.k as i32) >= 0 {
            ins.k = ins.k.wrapping_add(SKF_NET_OFF as u32);
        }
    }
}

/// A program accepting what both `a` and `b` accept (with `b`'s snap length): `a` is copied
/// with each `ret #k` (k != 0) turned into a jump to the start of `b` and each `ret a` into a
/// jump to a two-instruction test (`a == 0` → `ret #0`, else on to `b`); `b` follows intact.
/// Jump offsets inside `a` stay valid because every instruction keeps its place.
pub fn and(a: &[Insn], b: &[Insn]) -> Result<Vec<Insn>, LiveError> {
    let has_ret_a = a.iter().any(|i| i.code == BPF_RET | BPF_A);
    let trailer = if has_ret_a { 2 } else { 0 };
    let total = a.len() + trailer + b.len();
    if total > BPF_MAXINSNS {
        return Err(LiveError::Filter(format!(
            "combined filter has {total} instructions, over the kernel's limit of {BPF_MAXINSNS}"
        )));
    }
    let n = a.len();
    let b_start = n + trailer;
    let mut out = Vec::with_capacity(total);
    for (i, ins) in a.iter().enumerate() {
        let to = |target: usize| Insn::stmt(BPF_JMP | BPF_JA, (target - (i + 1)) as u32);
        out.push(match ins.code {
            c if c == BPF_RET | BPF_K && ins.k != 0 => to(b_start),
            c if c == BPF_RET | BPF_A => to(n),
            _ => *ins,
        });
    }
    if has_ret_a {
        // n: jeq #0 → n+1 (ret 0), else → n+2 (b)
        out.push(Insn::jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1));
        out.push(Insn::stmt(BPF_RET | BPF_K, 0));
    }
    out.extend_from_slice(b);
    Ok(out)
}

// ---------------------------------------------------------------- interpreter

/// The skb fields ancillary loads read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ancillary {
    /// Ethertype, host order (0x0800, 0x86DD).
    pub protocol: u16,
    pub pkttype: u8,
    pub ifindex: i32,
}

/// Runs a classic BPF program over `pkt`, a packet starting at its network header, the way
/// the kernel's socket filter does: `SKF_NET_OFF + k` reads `pkt[k]`, `SKF_AD_OFF +
/// PROTOCOL/PKTTYPE/IFINDEX` read `ad`, a load out of bounds (or at a link-relative offset:
/// there is no link header here) ends the program with 0, as does division by zero or a jump
/// out of the program. Returns the snap length (0 = drop). Never panics.
pub fn run(prog: &[Insn], pkt: &[u8], ad: &Ancillary) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; MEMWORDS];
    let mut pc = 0usize;
    // Jumps only go forward, so the program ends within prog.len() steps.
    while let Some(&ins) = prog.get(pc) {
        pc += 1;
        let k = ins.k;
        match ins.code & 0x07 {
            BPF_LD | BPF_LDX => {
                let ldx = ins.code & 0x07 == BPF_LDX;
                let size = match ins.code & 0x18 {
                    BPF_W => 4,
                    BPF_H => 2,
                    BPF_B => 1,
                    _ => return 0,
                };
                let v = match ins.code & 0xe0 {
                    BPF_IMM => Some(k),
                    BPF_MEM => mem.get(k as usize).copied(),
                    BPF_LEN => Some(pkt.len() as u32),
                    BPF_ABS if !ldx => load(pkt, ad, k as i32, size, true),
                    BPF_IND if !ldx => load(pkt, ad, x.wrapping_add(k) as i32, size, false),
                    BPF_MSH if ldx && size == 1 => {
                        load(pkt, ad, k as i32, 1, false).map(|b| 4 * (b & 0xf))
                    }
                    _ => None,
                };
                let Some(v) = v else { return 0 };
                if ldx { x = v } else { a = v }
            }
            BPF_ST => match mem.get_mut(k as usize) {
                Some(m) => *m = a,
                None => return 0,
            },
            BPF_STX => match mem.get_mut(k as usize) {
                Some(m) => *m = x,
                None => return 0,
            },
            BPF_ALU => {
                let src = if ins.code & BPF_X != 0 { x } else { k };
                a = match ins.code & 0xf0 {
                    BPF_ADD => a.wrapping_add(src),
                    BPF_SUB => a.wrapping_sub(src),
                    BPF_MUL => a.wrapping_mul(src),
                    BPF_DIV if src == 0 => return 0,
                    BPF_DIV => a / src,
                    BPF_MOD if src == 0 => return 0,
                    BPF_MOD => a % src,
                    BPF_OR => a | src,
                    BPF_AND => a & src,
                    BPF_XOR => a ^ src,
                    BPF_LSH => a.checked_shl(src).unwrap_or(0),
                    BPF_RSH => a.checked_shr(src).unwrap_or(0),
                    BPF_NEG => a.wrapping_neg(),
                    _ => return 0,
                };
            }
            BPF_JMP => {
                let op = ins.code & 0xf0;
                if op == BPF_JA {
                    let Some(t) = pc.checked_add(k as usize) else {
                        return 0;
                    };
                    pc = t;
                    continue;
                }
                let src = if ins.code & BPF_X != 0 { x } else { k };
                let cond = match op {
                    BPF_JEQ => a == src,
                    BPF_JGT => a > src,
                    BPF_JGE => a >= src,
                    BPF_JSET => a & src != 0,
                    _ => return 0,
                };
                pc += usize::from(if cond { ins.jt } else { ins.jf });
            }
            BPF_RET => {
                return match ins.code & 0x18 {
                    BPF_K => k,
                    BPF_A => a,
                    _ => 0,
                };
            }
            _ => {
                // BPF_MISC
                match ins.code & 0xf8 {
                    BPF_TAX => x = a,
                    BPF_TXA => a = x,
                    _ => return 0,
                }
            }
        }
    }
    0
}

fn load(pkt: &[u8], ad: &Ancillary, off: i32, size: usize, abs: bool) -> Option<u32> {
    if (SKF_AD_OFF..0).contains(&off) {
        if !abs {
            return None;
        }
        return match off - SKF_AD_OFF {
            SKF_AD_PROTOCOL => Some(u32::from(ad.protocol)),
            SKF_AD_PKTTYPE => Some(u32::from(ad.pkttype)),
            SKF_AD_IFINDEX => Some(ad.ifindex as u32),
            _ => None,
        };
    }
    if !(SKF_NET_OFF..SKF_AD_OFF).contains(&off) {
        // link-relative (SKF_LL_OFF range or plain offsets): no link header here
        return None;
    }
    let start = (off - SKF_NET_OFF) as usize;
    let bytes = pkt.get(start..start.checked_add(size)?)?;
    Some(bytes.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
}

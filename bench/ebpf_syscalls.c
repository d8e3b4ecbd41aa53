/* A fixed system-call loop for bench/ebpf_syscalls.py: what tracing costs per call, in the
 * CPU time of the process that makes the calls.
 *
 *   ebpf_syscalls traced N PATH   a "server" on a Unix socket bound at PATH, connected to
 *                                 itself; prints its pid, waits for a line on stdin, then runs
 *                                 3 x N iterations of write(client, 64) poll(server) read(server)
 *                                 write(server, 300) read(client) getppid(), printing the CPU ns
 *                                 per iteration of each third
 *   ebpf_syscalls other N         the same calls on a socketpair (no address: never traced),
 *                                 at once, once: what a process that is not traced pays */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void run(int c, int s, long n)
{
	static char buf[4096];
	double t0 = cpu_ns();
	for (long i = 0; i < n; i++) {
		struct pollfd p = {s, POLLIN, 0};
		if (write(c, buf, 64) != 64 || poll(&p, 1, 0) != 1 || read(s, buf, sizeof buf) != 64 ||
		    write(s, buf, 300) != 300 || read(c, buf, sizeof buf) != 300) {
			perror("ebpf_syscalls: the loop's calls");
			exit(1);
		}
		syscall(SYS_getppid);
	}
	printf("%.1f\n", (cpu_ns() - t0) / n);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "traced") && strcmp(argv[1], "other")) ||
	    (!strcmp(argv[1], "traced") && argc < 4)) {
		fprintf(stderr, "usage: ebpf_syscalls traced N PATH | other N\n");
		return 2;
	}
	long n = atol(argv[2]);
	if (!strcmp(argv[1], "other")) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
			perror("socketpair");
			return 1;
		}
		run(sv[0], sv[1], n);
		return 0;
	}
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, argv[3], sizeof a.sun_path - 1);
	unlink(a.sun_path);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	int c = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(l, (void *)&a, sizeof a) || listen(l, 1) || connect(c, (void *)&a, sizeof a)) {
		perror("ebpf_syscalls: the socket");
		return 1;
	}
	int s = accept(l, 0, 0);
	printf("%d\n", getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int rep = 0; rep < 3; rep++)
		run(c, s, n);
	unlink(a.sun_path);
	return 0;
}

/* The watchdog's connections (comm_watch.h): rank 0 listens on every IPv4
 * address, the others connect and present the job's token and their rank;
 * a stranger (another job, a port scan) is closed unheard. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/comm_watch.h"
#include "exec/comm_watch_net.h"

static int listen_fd = -1;
static int *peer_fd; /* by rank; -1: none */

int *hp_comm_watch_fds(void)
{
	return peer_fd;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Up to 8 IPv4 addresses of this host, the loopback last (a peer on
 * another node needs a routable one; one on this node takes any). */
static void host_addrs(struct hp_watch_addr *a)
{
	struct ifaddrs *ifs, *i;

	a->naddr = 0;
	if (getifaddrs(&ifs) == 0) {
		for (i = ifs; i && a->naddr < 7; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
			    !(i->ifa_flags & IFF_LOOPBACK))
				a->addr[a->naddr++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		freeifaddrs(ifs);
	}
	a->addr[a->naddr++] = htonl(INADDR_LOOPBACK);
}

int hp_comm_watch_listen(struct hp_watch_addr *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t len = sizeof sa;

	memset(a, 0, sizeof *a);
	if (getrandom(&a->token, sizeof a->token, 0) != sizeof a->token)
		return hp_error(-errno, "rank 0: no random job token: %s", strerror(errno));
	if ((listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return hp_error(-errno, "rank 0: watchdog socket: %s", strerror(errno));
	if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(listen_fd, 1024) < 0 ||
	    getsockname(listen_fd, (struct sockaddr *)&sa, &len) < 0)
		return hp_error(-errno, "rank 0: watchdog socket: %s", strerror(errno));
	a->port = ntohs(sa.sin_port);
	host_addrs(a);
	return 0;
}

static int wait_fd(int fd, short ev, double until)
{
	struct pollfd p = { .fd = fd, .events = ev };
	double left = until - mono();

	return left > 0 && poll(&p, 1, (int)(left * 1000) + 1) == 1;
}

/* One greeting: the token and a rank not yet seen, else -1. */
static int greeting(int fd, const struct hp_watch_addr *a, int nranks, double until)
{
	struct hp_watch_rec r;

	if (!wait_fd(fd, POLLIN, until) || recv(fd, &r, sizeof r, MSG_WAITALL) != sizeof r)
		return -1;
	if (ntohl(r.type) != HP_WATCH_HELLO || r.token != a->token)
		return -1;
	int k = (int)ntohl(r.a);
	return k > 0 && k < nranks && peer_fd[k] < 0 ? k : -1;
}

int hp_comm_watch_accept(const struct hp_watch_addr *a, int nranks)
{
	double until = mono() + 60;
	int got = 1;

	if (!(peer_fd = malloc((size_t)nranks * sizeof *peer_fd)))
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < nranks; i++)
		peer_fd[i] = -1;
	while (got < nranks && wait_fd(listen_fd, POLLIN, until)) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC), k;
		if (fd < 0)
			continue;
		if ((k = greeting(fd, a, nranks, mono() + 5)) < 0) {
			close(fd);
			continue;
		}
		peer_fd[k] = fd;
		got++;
	}
	close(listen_fd);
	listen_fd = -1;
	for (int k = 1; k < nranks; k++)
		if (peer_fd[k] < 0)
			return hp_error(HP_EPROTO, "rank 0 of %d: rank %d did not reach the watchdog port %u within 60 s "
					"(a firewall between the nodes?)", nranks, k, a->port);
	return 0;
}

/* A connection to addr within 3 s. */
static int dial(uint32_t addr, uint32_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = addr };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
	socklen_t len = sizeof err;

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS)
		goto fail;
	if (!wait_fd(fd, POLLOUT, mono() + 3) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
		goto fail;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
fail:
	close(fd);
	return -1;
}

int hp_comm_watch_connect(const struct hp_watch_addr *a, int rank, int nranks)
{
	struct hp_watch_rec r = { .type = htonl(HP_WATCH_HELLO), .a = htonl((uint32_t)rank), .token = a->token };
	int fd = -1;

	if (!(peer_fd = malloc((size_t)nranks * sizeof *peer_fd)))
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < nranks; i++)
		peer_fd[i] = -1;
	for (uint32_t i = 0; i < a->naddr && i < 8 && fd < 0; i++)
		fd = dial(a->addr[i], a->port);
	if (fd < 0)
		return hp_error(HP_EPROTO, "rank %d of %d: cannot reach rank 0's watchdog port %u at any of its %u "
				"addresses (a firewall between the nodes?)", rank, nranks, a->port, a->naddr);
	if (send(fd, &r, sizeof r, MSG_NOSIGNAL) != sizeof r) {
		close(fd);
		return hp_error(HP_EPROTO, "rank %d of %d: rank 0's watchdog closed the connection", rank, nranks);
	}
	peer_fd[0] = fd;
	return 0;
}

/* Burst UDP I/O: many datagrams per system call.
 *
 * Receive: recvmmsg, and with UDP_GRO on the socket one message may carry many
 * coalesced segments (a cmsg gives the segment size); every segment is copied into its own
 * fixed-stride slot, so the caller sees one row per datagram whatever the kernel merged.
 * Send: sendmmsg, and with UDP_SEGMENT (GSO) a run of same-size datagrams to one destination
 * leaves as one message that the kernel cuts into the same datagrams on the wire; without GSO
 * (the caller's choice, or the kernel refused it once) each datagram is one message.
 *
 * Addresses are IPv4 packed as one int64: (host-order address << 16) | port.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "engine.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

/* The kernel's cap on segments per GSO send (UDP_MAX_SEGMENTS), and on one UDP payload. */
#define GSO_MAX_SEGMENTS 64
#define GSO_MAX_BYTES 65000
/* One received message: a datagram, or a GRO run of segments, at most a UDP payload. */
#define MESSAGE_BYTES 65536
#define MAX_MESSAGES 64
#define MAX_SEND_MESSAGES 64

static int64_t
pack_address(const struct sockaddr_in *sa)
{
    return ((int64_t)ntohl(sa->sin_addr.s_addr) << 16) | ntohs(sa->sin_port);
}

static void
unpack_address(int64_t packed, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl((uint32_t)(packed >> 16));
    sa->sin_port = htons((uint16_t)(packed & 0xFFFF));
}

int
engine_enable_gro(int fd)
{
    int on = 1;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
}

/* Receive up to `slots` datagrams into `out` (row i at out + i * stride, at most stride bytes
 * copied; sizes[i] is the datagram's real length, so a longer one is seen as too long).
 * `scratch` holds the raw messages. Blocks for the first message only when `wait` is set and
 * the socket is blocking. Returns the number of rows, or -1 with errno set when nothing was
 * read (EAGAIN: nothing there). Segments that do not fit in `slots` are counted in *lost. */
Py_ssize_t
engine_recv_burst(int fd, uint8_t *scratch, Py_ssize_t scratch_len, uint8_t *out,
                  Py_ssize_t stride, Py_ssize_t slots, int64_t *sizes, int64_t *addrs,
                  int wait, Py_ssize_t *lost)
{
    struct mmsghdr msgs[MAX_MESSAGES];
    struct iovec iovs[MAX_MESSAGES];
    struct sockaddr_in names[MAX_MESSAGES];
    char controls[MAX_MESSAGES][CMSG_SPACE(sizeof(int))];
    Py_ssize_t messages = scratch_len / MESSAGE_BYTES;
    /* Enough messages that a burst of full-size datagrams fills `slots`, no more: a GRO
     * message of stride-sized segments holds MESSAGE_BYTES / stride of them. */
    Py_ssize_t per_message = MESSAGE_BYTES / (stride > 0 ? stride : 1);
    Py_ssize_t wanted = per_message > 0 ? slots / per_message : slots;
    if (wanted < 1)
        wanted = 1;
    if (wanted < messages)
        messages = wanted;
    if (messages > MAX_MESSAGES)
        messages = MAX_MESSAGES;
    if (messages < 1 || slots < 1) {
        errno = EINVAL;
        return -1;
    }
    for (Py_ssize_t m = 0; m < messages; m++) {
        iovs[m].iov_base = scratch + m * MESSAGE_BYTES;
        iovs[m].iov_len = MESSAGE_BYTES;
        memset(&msgs[m].msg_hdr, 0, sizeof(struct msghdr));
        msgs[m].msg_hdr.msg_iov = &iovs[m];
        msgs[m].msg_hdr.msg_iovlen = 1;
        msgs[m].msg_hdr.msg_name = &names[m];
        msgs[m].msg_hdr.msg_namelen = sizeof(names[m]);
        msgs[m].msg_hdr.msg_control = controls[m];
        msgs[m].msg_hdr.msg_controllen = sizeof(controls[m]);
    }
    int got;
    Py_BEGIN_ALLOW_THREADS
    got = recvmmsg(fd, msgs, (unsigned int)messages, wait ? MSG_WAITFORONE : MSG_DONTWAIT, NULL);
    Py_END_ALLOW_THREADS
    if (got < 0)
        return -1;
    Py_ssize_t rows = 0;
    *lost = 0;
    for (int m = 0; m < got; m++) {
        Py_ssize_t length = msgs[m].msg_len;
        Py_ssize_t segment = length;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[m].msg_hdr); c != NULL;
             c = CMSG_NXTHDR(&msgs[m].msg_hdr, c)) {
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int size;
                memcpy(&size, CMSG_DATA(c), sizeof(size));
                if (size > 0)
                    segment = size;
            }
        }
        int64_t source = pack_address(&names[m]);
        const uint8_t *data = scratch + m * MESSAGE_BYTES;
        Py_ssize_t offset = 0;
        do {
            Py_ssize_t size = length - offset < segment ? length - offset : segment;
            if (rows == slots) {
                (*lost)++;
            } else {
                memcpy(out + rows * stride, data + offset, size < stride ? size : stride);
                sizes[rows] = size;
                addrs[rows] = source;
                rows++;
            }
            offset += size;
        } while (offset < length);
    }
    return rows;
}

/* Row `i` of a send, through the optional permutation `order`. */
#define ROW(i) (order != NULL ? order[(i)] : (i))

/* Send rows ROW(0..n) of `buf` (row r at buf + r * stride, sizes[r] bytes to addrs[r]).
 * With *gso, consecutive rows to one destination go as one segmented message: GSO cuts it
 * into segments of the first row's size, so a run holds equal sizes (the last may be
 * shorter). Returns the number of datagrams the kernel refused (a full buffer, an
 * unreachable port): each is lost, as on a congested switch port. *gso is cleared when the
 * kernel refuses segmentation, and the rest goes one datagram per message. */
Py_ssize_t
engine_send_burst(int fd, const uint8_t *buf, Py_ssize_t stride, const int64_t *sizes,
                  const int64_t *addrs, const int64_t *order, Py_ssize_t n, int *gso)
{
    struct mmsghdr msgs[MAX_SEND_MESSAGES];
    struct sockaddr_in names[MAX_SEND_MESSAGES];
    char controls[MAX_SEND_MESSAGES][CMSG_SPACE(sizeof(uint16_t))];
    struct iovec segments[MAX_SEND_MESSAGES * GSO_MAX_SEGMENTS];
    Py_ssize_t firsts[MAX_SEND_MESSAGES + 1];
    Py_ssize_t failed = 0, i = 0;
    while (i < n) {
        int messages = 0;
        Py_ssize_t used = 0;
        while (i < n && messages < MAX_SEND_MESSAGES) {
            Py_ssize_t first = ROW(i), count = 0, bytes = 0;
            int64_t size = sizes[first];
            firsts[messages] = i;
            while (i < n && count < (*gso ? GSO_MAX_SEGMENTS : 1)) {
                Py_ssize_t r = ROW(i);
                if (count > 0 && (addrs[r] != addrs[first] || sizes[r] > size
                                  || bytes + sizes[r] > GSO_MAX_BYTES))
                    break;
                segments[used + count].iov_base = (void *)(buf + r * stride);
                segments[used + count].iov_len = (size_t)sizes[r];
                bytes += sizes[r];
                count++;
                i++;
                if (sizes[r] < size)
                    break; /* a short segment ends its run */
            }
            struct msghdr *h = &msgs[messages].msg_hdr;
            memset(h, 0, sizeof(*h));
            unpack_address(addrs[first], &names[messages]);
            h->msg_name = &names[messages];
            h->msg_namelen = sizeof(names[messages]);
            h->msg_iov = &segments[used];
            h->msg_iovlen = (size_t)count;
            if (count > 1) {
                h->msg_control = controls[messages];
                h->msg_controllen = sizeof(controls[messages]);
                struct cmsghdr *c = CMSG_FIRSTHDR(h);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t segment = (uint16_t)size;
                memcpy(CMSG_DATA(c), &segment, sizeof(segment));
            }
            used += count;
            messages++;
        }
        firsts[messages] = i;
        int done = 0;
        while (done < messages) {
            int sent;
            Py_BEGIN_ALLOW_THREADS
            sent = sendmmsg(fd, msgs + done, (unsigned int)(messages - done), 0);
            Py_END_ALLOW_THREADS
            if (sent > 0) {
                done += sent;
                continue;
            }
            if (errno == EINTR)
                continue;
            Py_ssize_t count = firsts[done + 1] - firsts[done];
            if (count > 1 && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT
                              || errno == EOPNOTSUPP)) {
                /* No segmentation offload on this path: the rest one datagram a message. */
                *gso = 0;
                Py_ssize_t from = firsts[done];
                if (order != NULL)
                    return failed + engine_send_burst(fd, buf, stride, sizes, addrs,
                                                      order + from, n - from, gso);
                return failed + engine_send_burst(fd, buf + from * stride, stride,
                                                  sizes + from, addrs + from, NULL, n - from,
                                                  gso);
            }
            failed += count;
            done++;
        }
    }
    return failed;
}

/* h2.c -- an HTTP/2 connection's frames, both ways, read for outcomes
 * (h2.h). Each direction is one small machine over octets: the 9-octet
 * frame header, then its payload, whose padding and priority fields are
 * stepped over so that only a header block's fragment reaches the HPACK
 * decoder. Frames that say nothing about outcomes (PING, WINDOW_UPDATE,
 * PRIORITY, unknown types) are only counted past. */
#include "h2.h"

#include <string.h>

enum {
	F_DATA = 0x0,
	F_HEADERS = 0x1,
	F_RST_STREAM = 0x3,
	F_SETTINGS = 0x4,
	F_PUSH_PROMISE = 0x5,
	F_GOAWAY = 0x7,
	F_CONTINUATION = 0x9,
};

enum {
	FL_END_STREAM = 0x1,
	FL_ACK = 0x1,
	FL_END_HEADERS = 0x4,
	FL_PADDED = 0x8,
	FL_PRIORITY = 0x20,
};

#define SETTINGS_HEADER_TABLE_SIZE 0x1
#define REFUSED_STREAM             0x7

/* the sweeps a GOAWAY starts (h->sweeping) */
enum { SWEEP_NONE, SWEEP_ABOVE, SWEEP_ALL };

void ns_h2_init(struct ns_h2 *h)
{
	memset(h, 0, sizeof(*h));
	h->room = UINT32_MAX;
	ns_hpack_init(&h->hp);
}

static void emit(struct ns_h2 *h, ns_h2_cb cb, void *arg, struct ns_h2_event *ev)
{
	if (h->blind)
		return;
	if (h->room)
		h->room--;
	cb(arg, ev);
}

static void go_blind(struct ns_h2 *h, int why, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = {
		.type = NS_H2_BLIND, .why = (uint8_t)why, .place = NS_H2_STREAMS, .grpc_status = -1, .retry_after = ""
	};

	if (!h->blind)
		h->why = (uint8_t)why;
	emit(h, cb, arg, &ev);
	h->blind = 1;
}

/* The error codes with which a client says the server's answer was wrong
 * (RFC 9113 7): PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR,
 * SETTINGS_TIMEOUT, FRAME_SIZE_ERROR, COMPRESSION_ERROR, ENHANCE_YOUR_CALM.
 * NO_ERROR, CANCEL and STREAM_CLOSED (curl's when it drops a transfer) are
 * the program's own giving up. */
static int blames_answer(uint32_t code)
{
	return code == 0x1 || code == 0x2 || code == 0x3 || code == 0x4 || code == 0x6 || code == 0x9 || code == 0xb;
}

/**** streams ****/

static struct ns_h2_stream *find(struct ns_h2 *h, uint32_t id)
{
	for (unsigned i = 0; id && i < h->hi && i < NS_H2_STREAMS; i++)
		if (h->st[i].id == id)
			return &h->st[i];
	return NULL;
}

/* A stream ends with an event of type (its figures filled in from s;
 * pushback_ms: gRPC's server pushback in the block that ended it, or -1). */
static void settle_pb(struct ns_h2 *h, struct ns_h2_stream *s, int type, uint32_t code, int32_t pushback_ms,
		      ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = (uint8_t)type,
				  .grpc = (s->flags & NS_H2_S_GRPC) != 0,
				  .goaway = type == NS_H2_REJECTED && h->sweeping == SWEEP_ALL,
				  .place = (uint16_t)(s - h->st),
				  .status = s->status,
				  .grpc_status = s->grpc_status,
				  .stream = s->id,
				  .code = code,
				  .pushback_ms = pushback_ms,
				  .retry_after = "" };

	memset(s, 0, sizeof(*s));
	while (h->hi && !h->st[h->hi - 1].id)
		h->hi--;
	emit(h, cb, arg, &ev);
}

static void settle(struct ns_h2 *h, struct ns_h2_stream *s, int type, uint32_t code, ns_h2_cb cb, void *arg)
{
	settle_pb(h, s, type, code, -1, cb, arg);
}

/* A GOAWAY's streams, one room at a time: 1 when all are settled, 0 when
 * the room ran out first (the feed stops; the next one goes on). The
 * server's settles those above its last stream as not processed; the
 * client's, with a code that blames the answer, fails them all. */
static int sweep(struct ns_h2 *h, ns_h2_cb cb, void *arg)
{
	for (; h->sweep_at < h->hi && h->sweep_at < NS_H2_STREAMS; h->sweep_at++) {
		struct ns_h2_stream *s = &h->st[h->sweep_at];

		if (!s->id || (h->sweeping == SWEEP_ABOVE && s->id <= h->goaway_last))
			continue;
		if (h->room < 1 && !h->blind)
			return 0;
		if (h->sweeping == SWEEP_ABOVE)
			settle(h, s, NS_H2_UNPROCESSED, 0, cb, arg);
		else
			settle(h, s, NS_H2_REJECTED, h->sweep_code, cb, arg);
	}
	h->sweeping = SWEEP_NONE;
	return 1;
}

static void open_stream(struct ns_h2 *h, uint32_t id, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = NS_H2_OPEN, .grpc_status = -1, .stream = id, .retry_after = "" };
	struct ns_h2_stream *s = NULL;

	h->last_opened = id;
	for (unsigned i = 0; !s && i < h->hi && i < NS_H2_STREAMS; i++)
		if (!h->st[i].id)
			s = &h->st[i];
	if (!s && h->hi < NS_H2_STREAMS)
		s = &h->st[h->hi++];
	if (!s) {
		go_blind(h, NS_H2_WHY_STREAMS, cb, arg); /* more streams open at once than are followed */
		return;
	}
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->grpc_status = -1;
	ev.place = (uint16_t)(s - h->st);
	emit(h, cb, arg, &ev);
	if (h->goaway && id > h->goaway_last)
		settle(h, s, NS_H2_UNPROCESSED, 0, cb, arg); /* opened after the server said it would not */
}

static void answered(struct ns_h2 *h, struct ns_h2_stream *s, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = NS_H2_FIRST,
				  .place = (uint16_t)(s - h->st),
				  .grpc_status = -1,
				  .stream = s->id,
				  .retry_after = "" };

	if (s->flags & NS_H2_S_ANSWERED)
		return;
	s->flags |= NS_H2_S_ANSWERED;
	emit(h, cb, arg, &ev);
}

/**** the server's header blocks ****/

/* END_HEADERS: what the block said, for its stream. */
static void block_done(struct ns_h2 *h, ns_h2_cb cb, void *arg)
{
	struct ns_h2_stream *s = h->block_push ? NULL : find(h, h->block_stream);
	const struct ns_hfields *f = &h->block;

	h->block_stream = 0;
	if (ns_hpack_end(&h->hp) < 0) {
		go_blind(h, NS_H2_WHY_HPACK, cb, arg);
		return;
	}
	if (!s)
		return; /* a pushed request, or a stream not followed: the table is what mattered */
	if (!(s->flags & NS_H2_S_FINAL)) {
		struct ns_h2_event ev = { .type = NS_H2_HEADERS,
					  .place = (uint16_t)(s - h->st),
					  .grpc_status = -1,
					  .pushback_ms = -1,
					  .stream = s->id };

		if (f->status >= 100 && f->status < 200 && !h->block_end_stream)
			return; /* an interim answer: the final one is still to come */
		s->flags |= NS_H2_S_FINAL | (f->grpc ? NS_H2_S_GRPC : 0);
		s->status = f->status;
		ev.status = f->status;
		ev.grpc = f->grpc;
		ev.retry_after = f->retry_after;
		emit(h, cb, arg, &ev);
	}
	if (f->grpc_status >= 0)
		s->grpc_status = (int8_t)(f->grpc_status < 127 ? f->grpc_status : 127); /* trailers, or trailers-only */
	if (h->block_end_stream)
		settle_pb(h, s, NS_H2_DONE, 0, f->pushback_ms, cb, arg);
}

/**** frames ****/

/* The frame header is whole: what the frame begins. 0, or -1: blind. */
static int frame_begin(struct ns_h2 *h, struct ns_h2_dir *d, int server, ns_h2_cb cb, void *arg)
{
	struct ns_h2_stream *s;
	uint32_t len = (uint32_t)d->hdr[0] << 16 | (uint32_t)d->hdr[1] << 8 | d->hdr[2];

	d->type = d->hdr[3];
	d->flags = d->hdr[4];
	d->stream = ((uint32_t)d->hdr[5] << 24 | (uint32_t)d->hdr[6] << 16 | (uint32_t)d->hdr[7] << 8 | d->hdr[8]) &
		0x7fffffffu;
	d->left = len;
	d->pre = 0;
	d->pad = 0;
	d->padlen_due = 0;
	d->setting_len = 0;
	d->fixed_len = 0;
	if (server && h->block_stream && (d->type != F_CONTINUATION || d->stream != h->block_stream))
		return -1; /* 6.10: nothing may come between a header block's frames */
	switch (d->type) {
	case F_DATA:
		d->padlen_due = (d->flags & FL_PADDED) != 0;
		if (!d->stream)
			return -1;
		if (server && (s = find(h, d->stream)) != NULL)
			answered(h, s, cb, arg);
		break;
	case F_HEADERS:
		d->padlen_due = (d->flags & FL_PADDED) != 0;
		d->pre = (d->flags & FL_PRIORITY) ? 5 : 0;
		if (!d->stream)
			return -1;
		if (!server) {
			if ((d->stream & 1) && d->stream > h->last_opened)
				open_stream(h, d->stream, cb, arg);
			break;
		}
		if ((s = find(h, d->stream)) != NULL)
			answered(h, s, cb, arg);
		h->block_stream = d->stream;
		h->block_end_stream = (d->flags & FL_END_STREAM) != 0;
		h->block_push = 0;
		ns_hpack_begin(&h->hp, &h->block);
		break;
	case F_PUSH_PROMISE:
		if (!server)
			break;
		d->padlen_due = (d->flags & FL_PADDED) != 0;
		d->pre = 4; /* the promised stream's id */
		h->block_stream = d->stream;
		h->block_end_stream = 0;
		h->block_push = 1;
		ns_hpack_begin(&h->hp, &h->block);
		break;
	case F_CONTINUATION:
		if (server && !h->block_stream)
			return -1;
		break;
	case F_SETTINGS:
		if (!server && !(d->flags & FL_ACK))
			h->settings_sent++;
		if (server && (d->flags & FL_ACK) && ++h->settings_acked >= h->table_seq && h->table_pending) {
			/* 6.5.3: acked in order; the server has the client's header
			 * table size, and it holds from here */
			ns_hpack_set_max(&h->hp, h->table_size);
			h->table_pending = 0;
		}
		break;
	default:
		break;
	}
	if (d->pre + d->padlen_due > d->left)
		return -1;
	return 0;
}

/* The payload is whole: what the frame ends. 0, or -1: blind. */
static int frame_end(struct ns_h2 *h, struct ns_h2_dir *d, int server, ns_h2_cb cb, void *arg)
{
	struct ns_h2_stream *s = find(h, d->stream);
	uint32_t v = d->fixed_len >= 4
		? ((uint32_t)d->fixed[0] << 24 | (uint32_t)d->fixed[1] << 16 | (uint32_t)d->fixed[2] << 8 | d->fixed[3])
		: 0;

	switch (d->type) {
	case F_DATA:
		if (server && s && (d->flags & FL_END_STREAM))
			settle(h, s, NS_H2_DONE, 0, cb, arg);
		break;
	case F_HEADERS:
	case F_PUSH_PROMISE:
	case F_CONTINUATION:
		if (server && h->block_stream && (d->flags & FL_END_HEADERS))
			block_done(h, cb, arg);
		break;
	case F_RST_STREAM:
		if (d->fixed_len < 4 || !s)
			break;
		if (!server)
			settle(h, s, blames_answer(v) ? NS_H2_REJECTED : NS_H2_CANCELLED, v, cb, arg);
		else
			settle(h, s, v == REFUSED_STREAM ? NS_H2_UNPROCESSED : NS_H2_FAILED, v, cb, arg);
		break;
	case F_GOAWAY:
		if (d->fixed_len < 4 || (!server && d->fixed_len < 8))
			break;
		if (server) {
			h->goaway = 1;
			h->goaway_last = v & 0x7fffffffu;
			h->sweeping = SWEEP_ABOVE;
		} else {
			uint32_t code = (uint32_t)d->fixed[4] << 24 | (uint32_t)d->fixed[5] << 16 |
				(uint32_t)d->fixed[6] << 8 | d->fixed[7];

			if (!blames_answer(code))
				break;
			h->sweeping = SWEEP_ALL;
			h->sweep_code = code;
		}
		h->sweep_at = 0;
		sweep(h, cb, arg);
		break;
	default:
		break;
	}
	return 0;
}

/* Payload octets of the frame being read (at most d->left of them). */
static int payload(struct ns_h2 *h, struct ns_h2_dir *d, int server, const uint8_t *p, size_t n)
{
	while (n) {
		size_t k;

		if (d->padlen_due) {
			d->pad = *p++;
			n--;
			d->left--;
			d->padlen_due = 0;
			if (d->pad + d->pre > d->left)
				return -1; /* padding longer than the payload */
			continue;
		}
		if (d->pre) {
			k = n < d->pre ? n : d->pre;
			d->pre = (uint8_t)(d->pre - k);
			d->left -= (uint32_t)k;
			p += k;
			n -= k;
			continue;
		}
		/* the body: a header block's fragment, a setting, a code; then padding */
		k = d->left > d->pad ? d->left - d->pad : 0;
		if (k > n)
			k = n;
		if (k == 0) { /* padding */
			k = n;
			d->left -= (uint32_t)k;
			return 0;
		}
		if (server && (d->type == F_HEADERS || d->type == F_PUSH_PROMISE || d->type == F_CONTINUATION)) {
			if (ns_hpack_feed(&h->hp, p, k, &h->block) < 0)
				return -1;
		} else if (d->type == F_RST_STREAM || d->type == F_GOAWAY) {
			for (size_t i = 0; i < k && d->fixed_len < sizeof(d->fixed); i++)
				d->fixed[d->fixed_len++] = p[i];
		} else if (!server && d->type == F_SETTINGS && !(d->flags & FL_ACK)) {
			for (size_t i = 0; i < k; i++) {
				d->setting[d->setting_len++] = p[i];
				if (d->setting_len == 6) {
					uint16_t id = (uint16_t)(d->setting[0] << 8 | d->setting[1]);

					if (id == SETTINGS_HEADER_TABLE_SIZE) {
						h->table_size = (uint32_t)d->setting[2] << 24 |
							(uint32_t)d->setting[3] << 16 | (uint32_t)d->setting[4] << 8 |
							d->setting[5];
						h->table_pending = 1;
						h->table_seq = h->settings_sent;
					}
					d->setting_len = 0;
				}
			}
		}
		d->left -= (uint32_t)k;
		p += k;
		n -= k;
	}
	return 0;
}

/* Octets read: n, or fewer where the caller's room ran low (a blind
 * reader reads everything: there is nothing more to say). */
static size_t feed(struct ns_h2 *h, struct ns_h2_dir *d, int server, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	size_t n0 = n;

	while (n && !h->blind) {
		if (h->sweeping && !sweep(h, cb, arg))
			break;
		if (h->room < NS_H2_ROOM)
			break;
		if (d->hlen < 9) {
			d->hdr[d->hlen++] = *p++;
			n--;
			if (d->hlen < 9)
				continue;
			if (frame_begin(h, d, server, cb, arg) < 0) {
				go_blind(h, NS_H2_WHY_FRAMING, cb, arg);
				break;
			}
		} else {
			size_t k = n < d->left ? n : d->left;
			int hpack = server &&
				(d->type == F_HEADERS || d->type == F_PUSH_PROMISE || d->type == F_CONTINUATION);

			if (payload(h, d, server, p, k) < 0) {
				go_blind(h, hpack ? NS_H2_WHY_HPACK : NS_H2_WHY_FRAMING, cb, arg);
				break;
			}
			p += k;
			n -= k;
		}
		if (d->hlen == 9 && d->left == 0) {
			d->hlen = 0;
			if (frame_end(h, d, server, cb, arg) < 0) {
				go_blind(h, NS_H2_WHY_FRAMING, cb, arg);
				break;
			}
		}
	}
	return h->blind ? n0 : n0 - n;
}

size_t ns_h2_out(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	size_t pre = 0;

	while (n && h->preface < NS_H2_PREFACE_LEN && !h->blind) {
		if (*p != (uint8_t)NS_H2_PREFACE[h->preface]) {
			go_blind(h, NS_H2_WHY_PREFACE, cb, arg);
			break;
		}
		h->preface++;
		p++;
		n--;
		pre++;
	}
	return pre + feed(h, &h->out, 0, p, n, cb, arg);
}

size_t ns_h2_in(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	return feed(h, &h->in, 1, p, n, cb, arg);
}

int ns_h2_end(struct ns_h2 *h, int how, ns_h2_cb cb, void *arg)
{
	if (h->sweeping && !sweep(h, cb, arg))
		return 1;
	if (how == NS_H2_END_CLOSED) {
		/* only an answer whose header block the program was reading:
		 * it could not have had it (a client that rejects a block
		 * stops reading and closes) */
		struct ns_h2_stream *s = h->block_push ? NULL : find(h, h->block_stream);

		if (s && !h->blind) {
			if (!(s->flags & NS_H2_S_FINAL) && h->block.status >= 200)
				s->status = h->block.status;
			settle(h, s, NS_H2_FAILED, NS_H2_BLOCK_CUT, cb, arg);
		}
		h->block_stream = 0;
		return 0;
	}
	for (unsigned i = 0; i < h->hi && i < NS_H2_STREAMS; i++) {
		if (!h->st[i].id)
			continue;
		if (h->room < 1 && !h->blind)
			return 1;
		settle(h, &h->st[i], NS_H2_FAILED, NS_H2_CONN_ENDED, cb, arg);
	}
	return 0;
}

/**** looking ahead ****/

void ns_h2_peek_begin(const struct ns_h2 *h, struct ns_h2_peek *k)
{
	memset(k, 0, sizeof(*k));
	k->d = h->out;
	k->preface = h->preface;
	k->blind = h->blind;
	k->last = h->last_opened;
}

/* Only frame headers are read: a payload is stepped over whole. */
void ns_h2_peek(struct ns_h2_peek *k, const uint8_t *p, size_t n)
{
	struct ns_h2_dir *d = &k->d;
	size_t i = 0;

	while (i < n && k->preface < NS_H2_PREFACE_LEN) {
		i++;
		k->preface++;
	}
	while (i < n && !k->blind) {
		if (d->hlen < 9) {
			if (d->hlen == 0) {
				k->hdr_at = k->seen + i; /* where this frame header begins */
				k->hdr_here = 1;
			}
			d->hdr[d->hlen++] = p[i++];
			if (d->hlen < 9)
				continue;
			{
				uint32_t len = (uint32_t)d->hdr[0] << 16 | (uint32_t)d->hdr[1] << 8 | d->hdr[2];
				uint32_t id = ((uint32_t)d->hdr[5] << 24 | (uint32_t)d->hdr[6] << 16 |
					       (uint32_t)d->hdr[7] << 8 | d->hdr[8]) &
					0x7fffffffu;

				if (d->hdr[3] == F_HEADERS && (id & 1) && id > k->last) {
					if (k->opened == 1 && k->hdr_here && k->hdr_at > 0)
						k->second_at = k->hdr_at;
					if (k->last == 0)
						k->firsts++;
					k->last = id;
					if (k->opened < NS_H2_STREAMS)
						k->ids[k->opened] = id;
					k->opened++;
				}
				d->left = len;
			}
		} else {
			size_t m = n - i < d->left ? n - i : d->left;

			i += m;
			d->left -= (uint32_t)m;
		}
		if (d->hlen == 9 && d->left == 0)
			d->hlen = 0;
	}
	k->seen += n;
}

void ns_h2_open(struct ns_h2 *h, uint32_t id, ns_h2_cb cb, void *arg)
{
	if (!h->blind && (id & 1) && id > h->last_opened)
		open_stream(h, id, cb, arg);
}

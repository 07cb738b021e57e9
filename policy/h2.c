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

void ns_h2_init(struct ns_h2 *h)
{
	memset(h, 0, sizeof(*h));
	ns_hpack_init(&h->hp);
}

static void emit(struct ns_h2 *h, ns_h2_cb cb, void *arg, struct ns_h2_event *ev)
{
	if (!h->blind)
		cb(arg, ev);
}

static void go_blind(struct ns_h2 *h, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = NS_H2_BLIND, .place = NS_H2_STREAMS, .grpc_status = -1, .retry_after = "" };

	emit(h, cb, arg, &ev);
	h->blind = 1;
}

/**** streams ****/

static struct ns_h2_stream *find(struct ns_h2 *h, uint32_t id)
{
	for (int i = 0; id && i < NS_H2_STREAMS; i++)
		if (h->st[i].id == id)
			return &h->st[i];
	return NULL;
}

/* A stream ends with an event of type (its figures filled in from s). */
static void settle(struct ns_h2 *h, struct ns_h2_stream *s, int type, uint32_t code, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = (uint8_t)type,
				  .grpc = s->grpc,
				  .place = (uint8_t)(s - h->st),
				  .status = s->status,
				  .grpc_status = s->grpc_status,
				  .stream = s->id,
				  .code = code,
				  .retry_after = "" };

	memset(s, 0, sizeof(*s));
	emit(h, cb, arg, &ev);
}

static void open_stream(struct ns_h2 *h, uint32_t id, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = NS_H2_OPEN, .grpc_status = -1, .stream = id, .retry_after = "" };
	struct ns_h2_stream *s = NULL;

	h->last_opened = id;
	for (int i = 0; !s && i < NS_H2_STREAMS; i++)
		if (!h->st[i].id)
			s = &h->st[i];
	if (!s) {
		go_blind(h, cb, arg); /* more streams open at once than are followed */
		return;
	}
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->grpc_status = -1;
	ev.place = (uint8_t)(s - h->st);
	emit(h, cb, arg, &ev);
	if (h->goaway && id > h->goaway_last)
		settle(h, s, NS_H2_UNPROCESSED, 0, cb, arg); /* opened after the server said it would not */
}

static void answered(struct ns_h2 *h, struct ns_h2_stream *s, ns_h2_cb cb, void *arg)
{
	struct ns_h2_event ev = { .type = NS_H2_FIRST,
				  .place = (uint8_t)(s - h->st),
				  .grpc_status = -1,
				  .stream = s->id,
				  .retry_after = "" };

	if (s->answered)
		return;
	s->answered = 1;
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
		go_blind(h, cb, arg);
		return;
	}
	if (!s)
		return; /* a pushed request, or a stream not followed: the table is what mattered */
	if (!s->final) {
		struct ns_h2_event ev = {
			.type = NS_H2_HEADERS, .place = (uint8_t)(s - h->st), .grpc_status = -1, .stream = s->id
		};

		if (f->status >= 100 && f->status < 200 && !h->block_end_stream)
			return; /* an interim answer: the final one is still to come */
		s->final = 1;
		s->status = f->status;
		s->grpc = f->grpc;
		ev.status = f->status;
		ev.grpc = f->grpc;
		ev.retry_after = f->retry_after;
		emit(h, cb, arg, &ev);
	}
	if (f->grpc_status >= 0)
		s->grpc_status = f->grpc_status; /* trailers, or a trailers-only answer */
	if (h->block_end_stream)
		settle(h, s, NS_H2_DONE, 0, cb, arg);
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
			settle(h, s, NS_H2_CANCELLED, v, cb, arg);
		else
			settle(h, s, v == REFUSED_STREAM ? NS_H2_UNPROCESSED : NS_H2_FAILED, v, cb, arg);
		break;
	case F_GOAWAY:
		if (!server || d->fixed_len < 4)
			break;
		h->goaway = 1;
		h->goaway_last = v & 0x7fffffffu;
		for (int i = 0; i < NS_H2_STREAMS; i++)
			if (h->st[i].id && h->st[i].id > h->goaway_last)
				settle(h, &h->st[i], NS_H2_UNPROCESSED, 0, cb, arg);
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

static void feed(struct ns_h2 *h, struct ns_h2_dir *d, int server, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	while (n && !h->blind) {
		if (d->hlen < 9) {
			d->hdr[d->hlen++] = *p++;
			n--;
			if (d->hlen < 9)
				continue;
			if (frame_begin(h, d, server, cb, arg) < 0) {
				go_blind(h, cb, arg);
				return;
			}
		} else {
			size_t k = n < d->left ? n : d->left;

			if (payload(h, d, server, p, k) < 0) {
				go_blind(h, cb, arg);
				return;
			}
			p += k;
			n -= k;
		}
		if (d->hlen == 9 && d->left == 0) {
			d->hlen = 0;
			if (frame_end(h, d, server, cb, arg) < 0) {
				go_blind(h, cb, arg);
				return;
			}
		}
	}
}

void ns_h2_out(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	while (n && h->preface < NS_H2_PREFACE_LEN && !h->blind) {
		if (*p != (uint8_t)NS_H2_PREFACE[h->preface]) {
			go_blind(h, cb, arg);
			return;
		}
		h->preface++;
		p++;
		n--;
	}
	feed(h, &h->out, 0, p, n, cb, arg);
}

void ns_h2_in(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg)
{
	feed(h, &h->in, 1, p, n, cb, arg);
}

void ns_h2_end(struct ns_h2 *h, ns_h2_cb cb, void *arg)
{
	for (int i = 0; i < NS_H2_STREAMS; i++)
		if (h->st[i].id)
			settle(h, &h->st[i], NS_H2_FAILED, NS_H2_CONN_ENDED, cb, arg);
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

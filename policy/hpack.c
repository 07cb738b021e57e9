/* hpack.c -- HPACK decoding of a server's header blocks (hpack.h).
 *
 * One octet at a time through a small state machine, so that a block split
 * anywhere (between frames, inside an integer, inside a Huffman code) reads
 * the same as a whole one. Strings are never stored whole: a name is matched
 * against the four an outcome reads as it passes, a value is kept (its first
 * NS_HPACK_VAL_MAX octets) only for those names; every other octet is only
 * counted, for the dynamic table's sizes. */
#include "hpack.h"

#include <string.h>

/**** the tables of RFC 7541 ****/

/* clang-format off: the RFC's tables, kept in their shape */

/* the RFC's tables, kept in their shape */
/* clang-format off */

/* Appendix A: the static table (index 1 to 61). */
static const struct {
	const char *name, *value;
} hp_static[] = {
	{ ":authority", "" }, { ":method", "GET" }, { ":method", "POST" }, { ":path", "/" },
	{ ":path", "/index.html" }, { ":scheme", "http" }, { ":scheme", "https" }, { ":status", "200" },
	{ ":status", "204" }, { ":status", "206" }, { ":status", "304" }, { ":status", "400" },
	{ ":status", "404" }, { ":status", "500" }, { "accept-charset", "" }, { "accept-encoding", "gzip, deflate" },
	{ "accept-language", "" }, { "accept-ranges", "" }, { "accept", "" }, { "access-control-allow-origin", "" },
	{ "age", "" }, { "allow", "" }, { "authorization", "" }, { "cache-control", "" },
	{ "content-disposition", "" }, { "content-encoding", "" }, { "content-language", "" },
	{ "content-length", "" }, { "content-location", "" }, { "content-range", "" }, { "content-type", "" },
	{ "cookie", "" }, { "date", "" }, { "etag", "" }, { "expect", "" }, { "expires", "" }, { "from", "" },
	{ "host", "" }, { "if-match", "" }, { "if-modified-since", "" }, { "if-none-match", "" }, { "if-range", "" },
	{ "if-unmodified-since", "" }, { "last-modified", "" }, { "link", "" }, { "location", "" },
	{ "max-forwards", "" }, { "proxy-authenticate", "" }, { "proxy-authorization", "" }, { "range", "" },
	{ "referer", "" }, { "refresh", "" }, { "retry-after", "" }, { "server", "" }, { "set-cookie", "" },
	{ "strict-transport-security", "" }, { "transfer-encoding", "" }, { "user-agent", "" }, { "vary", "" },
	{ "via", "" }, { "www-authenticate", "" },
};
#define HP_STATIC ((uint32_t)(sizeof(hp_static) / sizeof(hp_static[0])))

/* Appendix B, in its canonical form: the code is canonical (codes of one
 * length are consecutive, in symbol order, after every shorter code), so it
 * is wholly given by how many codes each length has and the symbols in
 * order of (length, symbol). 256 is EOS. */
static const uint8_t hp_count[31] = { 0, 0,  0,  0,  0,  10, 26, 32, 6,  0, 5,  3,  2,  6, 2, 3,
				      0, 0,  0,  3,  8,  13, 26, 29, 12, 4, 15, 19, 29, 0, 4 };
static const uint16_t hp_sym[257] = {
	48,  49,  50,  97,  99,  101, 105, 111, 115, 116, 32,  37,  45,  46,  47,  51,  52,  53,  54,  55,  56,  57,
	61,  65,  95,  98,  100, 102, 103, 104, 108, 109, 110, 112, 114, 117, 58,  66,  67,  68,  69,  70,  71,  72,
	73,  74,  75,  76,  77,  78,  79,  80,  81,  82,  83,  84,  85,  86,  87,  89,  106, 107, 113, 118, 119, 120,
	121, 122, 38,  42,  44,  59,  88,  90,  33,  34,  40,  41,  63,  39,  43,  124, 35,  62,  0,   36,  64,  91,
	93,  126, 94,  125, 60,  96,  123, 92,  195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172,
	176, 177, 179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170,
	173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232, 233, 1,   135, 137, 138, 139, 140, 141, 143, 147,
	149, 150, 151, 152, 155, 157, 158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239, 9,   142,
	144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193, 200, 201, 202, 205, 210, 213,
	218, 219, 238, 240, 242, 243, 255, 203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250,
	251, 252, 253, 254, 2,   3,   4,   5,   6,   7,   8,   11,  12,  14,  15,  16,  17,  18,  19,  20,  21,  23,
	24,  25,  26,  27,  28,  29,  30,  31,  127, 220, 249, 10,  13,  22,  256,
};
#define HP_EOS 256

/* clang-format on */

/* clang-format on */

/* the names an outcome reads, as NS_HN_* - 1 bits of a candidate mask */
static const char *const hp_names[] = { ":status", "retry-after", "grpc-status", "content-type",
					"grpc-retry-pushback-ms" };
static const uint8_t hp_name_len[] = { 7, 11, 11, 12, 22 };
#define HP_NAMES     5u
#define HP_ALL_NAMES 0x1f

/**** the states ****/

enum {
	S_REP,         /* a representation's first octet */
	S_INT,         /* a prefixed integer's continuation octets */
	S_STRLEN,      /* a string's first octet (H and the length's prefix) */
	S_STRLEN_MORE, /* ...the length's continuation octets */
	S_STR,         /* a string's octets */
};

enum {
	R_INDEXED, /* 6.1: name and value from the table */
	R_INC,     /* 6.2.1: a literal, added to the table */
	R_NOINC,   /* 6.2.2 and 6.2.3: a literal, not added */
	R_SIZE,    /* 6.3: the table's size changes */
};

static uint8_t hp_name_of(const char *s)
{
	for (unsigned i = 0; i < HP_NAMES; i++)
		if (strcmp(s, hp_names[i]) == 0)
			return (uint8_t)(i + 1);
	return NS_HN_OTHER;
}

void ns_hpack_init(struct ns_hpack *h)
{
	uint32_t first = 0;
	uint16_t base = 0;

	memset(h, 0, sizeof(*h));
	h->max = NS_HPACK_DEFAULT_TABLE;
	h->cap = NS_HPACK_DEFAULT_TABLE;
	/* canonical: the codes of length l follow those of l - 1, doubled */
	for (unsigned l = 1; l <= 30; l++) {
		h->hfirst[l] = first << (30 - l);
		h->hbase[l] = base;
		first += hp_count[l];
		base = (uint16_t)(base + hp_count[l]);
		h->hlimit[l] = first << (30 - l);
		first <<= 1;
	}
}

/**** the dynamic table ****/

static void evict_to(struct ns_hpack *h, uint32_t limit)
{
	while (h->count && h->size > limit) {
		const struct ns_hpack_entry *old = &h->ent[(h->newest + h->count - 1) % NS_HPACK_ENTRIES];

		if (old->kept)
			h->vals_used &= ~(1u << (old->kept - 1));
		h->size -= old->size;
		h->count--;
	}
}

void ns_hpack_set_max(struct ns_hpack *h, uint32_t max)
{
	h->max = max;
	/* a smaller limit takes effect at once: the encoder must follow with a
	 * size update, but the table can never hold more */
	if (h->cap > max) {
		h->cap = max;
		evict_to(h, max);
		h->need_update = 1;
	}
}

/* 4.4: entries are evicted until the new one fits; one larger than the
 * table empties it and is not added. -1: more entries than ent[] holds, or
 * more kept values than vals[]. */
static int insert(struct ns_hpack *h, uint32_t nlen, uint32_t vlen, uint8_t name, const char *val, uint8_t kept,
		  uint8_t over)
{
	uint32_t size = nlen + vlen + 32;
	struct ns_hpack_entry *e;
	int place = -1;

	if (size > h->cap) {
		evict_to(h, 0);
		return 0;
	}
	evict_to(h, h->cap - size);
	if (h->count == NS_HPACK_ENTRIES)
		return -1; /* a table over 4096 bytes of small entries: not followed */
	if (name != NS_HN_OTHER) {
		for (int i = 0; i < NS_HPACK_VALS && place < 0; i++)
			if (!(h->vals_used & (1u << i)))
				place = i;
		if (place < 0)
			return -1; /* more statuses and dates in the table than are kept: not followed */
		h->vals_used |= 1u << place;
		h->vals[place].vlen = kept;
		h->vals[place].over = over;
		memcpy(h->vals[place].val, val, kept);
	}
	h->newest = (uint16_t)((h->newest + NS_HPACK_ENTRIES - 1) % NS_HPACK_ENTRIES);
	h->count++;
	h->size += size;
	e = &h->ent[h->newest];
	e->nlen = (uint16_t)nlen;
	e->size = (uint16_t)size;
	e->name = name;
	e->kept = (uint8_t)(place + 1);
	return 0;
}

/* index (1-based, static then dynamic) into its name's octets, NS_HN_* and
 * value: -1 when there is no such entry */
static int lookup(const struct ns_hpack *h, uint32_t idx, uint32_t *nlen, uint8_t *name, const char **val,
		  uint32_t *vlen, int *over)
{
	*over = 0;
	if (idx == 0)
		return -1;
	if (idx <= HP_STATIC) {
		*nlen = (uint32_t)strlen(hp_static[idx - 1].name);
		*name = hp_name_of(hp_static[idx - 1].name);
		*val = hp_static[idx - 1].value;
		*vlen = (uint32_t)strlen(*val);
		return 0;
	}
	if (idx - HP_STATIC > h->count)
		return -1;
	{
		const struct ns_hpack_entry *e = &h->ent[(h->newest + idx - HP_STATIC - 1) % NS_HPACK_ENTRIES];

		*nlen = e->nlen;
		*name = e->name;
		*val = "";
		*vlen = 0;
		if (e->kept >= 1 && e->kept <= NS_HPACK_VALS) {
			*val = h->vals[e->kept - 1].val;
			*vlen = h->vals[e->kept - 1].vlen;
			*over = h->vals[e->kept - 1].over;
		}
	}
	return 0;
}

/**** what a header says ****/

static int digits(const char *s, uint32_t n, uint32_t max_digits)
{
	int v = 0;

	if (n == 0 || n > max_digits)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

static void emit(uint8_t name, const char *val, uint32_t vlen, int over, struct ns_hfields *out)
{
	int v;

	switch (name) {
	case NS_HN_STATUS:
		v = over ? -1 : digits(val, vlen, 3);
		out->status = v >= 100 ? (uint16_t)v : 0;
		break;
	case NS_HN_GRPC_STATUS:
		v = over ? -1 : digits(val, vlen, 3);
		out->grpc_status = (int16_t)v;
		break;
	case NS_HN_CONTENT_TYPE:
		/* "application/grpc", "application/grpc+proto", ... */
		out->grpc = vlen >= 16 && memcmp(val, "application/grpc", 16) == 0 &&
			(vlen == 16 || val[16] == '+' || val[16] == ';');
		break;
	case NS_HN_GRPC_PUSHBACK:
		/* milliseconds; anything else (a negative value says "do not
		 * retry"): none */
		out->pushback_ms = over ? -1 : digits(val, vlen, 9);
		break;
	case NS_HN_RETRY_AFTER:
		out->ra_len = over ? 0 : (uint8_t)vlen;
		memcpy(out->retry_after, val, out->ra_len);
		out->retry_after[out->ra_len] = '\0';
		break;
	default:
		break;
	}
}

/**** strings ****/

/* One decoded octet of the string being read: matched against the names
 * (a name) or kept (a value of a name an outcome reads). */
static void string_octet(struct ns_hpack *h, int is_name, uint8_t c)
{
	if (is_name) {
		for (unsigned i = 0; i < HP_NAMES; i++)
			if ((h->cand & (1u << i)) && (h->olen >= hp_name_len[i] || (uint8_t)hp_names[i][h->olen] != c))
				h->cand &= (uint8_t) ~(1u << i);
	} else if (h->name != NS_HN_OTHER) {
		if (h->vlen < NS_HPACK_VAL_MAX)
			h->val[h->vlen++] = (char)c;
		else
			h->over = 1;
	}
	h->olen++;
}

/* The symbol whose code begins the 30 bits of code30 (left-justified), and
 * its length. */
static uint16_t huff_symbol(const struct ns_hpack *h, uint32_t code30, unsigned *len)
{
	unsigned l = 5;

	while (l < 30 && code30 >= h->hlimit[l])
		l++;
	*len = l;
	return hp_sym[h->hbase[l] + ((code30 - h->hfirst[l]) >> (30 - l))];
}

/* One octet of a Huffman string: every symbol whose 30 bits are in. */
static int huff_octet(struct ns_hpack *h, int is_name, uint8_t b)
{
	h->hacc = h->hacc << 8 | b;
	h->hn = (uint8_t)(h->hn + 8);
	while (h->hn >= 30) {
		unsigned len;
		uint16_t sym = huff_symbol(h, (uint32_t)(h->hacc >> (h->hn - 30)) & 0x3fffffffu, &len);

		if (sym == HP_EOS)
			return -1; /* 5.2: EOS in a string is an error */
		string_octet(h, is_name, (uint8_t)sym);
		h->hn = (uint8_t)(h->hn - len);
	}
	return 0;
}

/* The string's last octet is in: the symbols left, then its padding, under
 * 8 bits of EOS's prefix (all ones), 5.2. */
static int huff_end(struct ns_hpack *h, int is_name)
{
	while (h->hn) {
		unsigned len;
		uint32_t code30 = (uint32_t)(h->hacc << (30 - h->hn)) & 0x3fffffffu; /* zeros after the last bit */
		uint16_t sym = huff_symbol(h, code30, &len);

		if (len > h->hn)
			break; /* no whole code: the padding */
		if (sym == HP_EOS)
			return -1;
		string_octet(h, is_name, (uint8_t)sym);
		h->hn = (uint8_t)(h->hn - len);
	}
	if (h->hn > 7 || (h->hacc & ((1u << h->hn) - 1)) != (1u << h->hn) - 1)
		return -1;
	return 0;
}

static void string_begin(struct ns_hpack *h, int is_name)
{
	h->olen = 0;
	h->hacc = 0;
	h->hn = 0;
	if (is_name) {
		h->cand = HP_ALL_NAMES;
	} else {
		h->vlen = 0;
		h->over = 0;
	}
}

/* The representation is whole: what it says, and the table. */
static int rep_done(struct ns_hpack *h, struct ns_hfields *out)
{
	emit(h->name, h->val, h->vlen, h->over, out);
	h->at_start = 0;
	h->st = S_REP;
	if (h->rep == R_INC)
		return insert(h, h->nlen, h->olen, h->name, h->val, h->vlen, h->over);
	return 0;
}

/* A string's octets are all read: a name goes on to its value's length, a
 * value ends the representation. 5.2: the padding is under 8 bits of EOS's
 * prefix (all ones). */
static int string_end(struct ns_hpack *h, int is_name, struct ns_hfields *out)
{
	if (h->huff && huff_end(h, is_name) < 0)
		return -1;
	if (!is_name)
		return rep_done(h, out);
	h->nlen = h->olen;
	h->name = NS_HN_OTHER;
	for (unsigned i = 0; i < HP_NAMES; i++)
		if ((h->cand & (1u << i)) && h->olen == hp_name_len[i])
			h->name = (uint8_t)(i + 1);
	h->in_name = 0;
	h->st = S_STRLEN; /* the value's length comes next */
	return 0;
}

/**** integers ****/

/* A representation's integer is whole (h->num): go on as its kind (h->rep)
 * says. */
static int int_done(struct ns_hpack *h, struct ns_hfields *out)
{
	const char *val;
	uint32_t vlen;
	int over;

	switch (h->rep) {
	case R_INDEXED:
		if (lookup(h, h->num, &h->nlen, &h->name, &val, &vlen, &over) < 0)
			return -1;
		emit(h->name, val, vlen, over, out);
		h->at_start = 0;
		h->st = S_REP;
		return 0;
	case R_SIZE:
		if (!h->at_start || h->num > h->max)
			return -1; /* 4.2: only at a block's start, never over the client's limit */
		h->need_update = 0;
		h->cap = h->num;
		evict_to(h, h->cap);
		h->st = S_REP;
		return 0;
	case R_INC:
	case R_NOINC:
		h->st = S_STRLEN;
		h->in_name = h->num == 0; /* 0: a literal name follows */
		if (h->num == 0)
			return 0;
		return lookup(h, h->num, &h->nlen, &h->name, &val, &vlen, &over);
	default:
		return -1;
	}
}

/**** the machine ****/

void ns_hpack_begin(struct ns_hpack *h, struct ns_hfields *out)
{
	memset(out, 0, sizeof(*out));
	out->grpc_status = -1;
	out->pushback_ms = -1;
	h->st = S_REP;
	h->at_start = 1;
}

int ns_hpack_end(struct ns_hpack *h)
{
	/* a block that ended inside a representation, or that owed a size update */
	return h->st == S_REP && !h->need_update ? 0 : -1;
}

/* The representation's first octet: its kind, and its integer's prefix. */
static int rep_start(struct ns_hpack *h, uint8_t b, struct ns_hfields *out)
{
	uint8_t mask;

	if (h->need_update && (b & 0xe0) != 0x20)
		return -1; /* 4.2: the lowered limit was not acknowledged */
	if (b & 0x80) {
		h->rep = R_INDEXED;
		mask = 0x7f;
	} else if (b & 0x40) {
		h->rep = R_INC;
		mask = 0x3f;
	} else if (b & 0x20) {
		h->rep = R_SIZE;
		mask = 0x1f;
	} else {
		h->rep = R_NOINC; /* 0000 without indexing, 0001 never indexed: alike here */
		mask = 0x0f;
	}
	h->name = NS_HN_OTHER;
	h->vlen = 0;
	h->over = 0;
	h->num = b & mask;
	h->shift = 0;
	if (h->num < mask)
		return int_done(h, out);
	h->st = S_INT;
	return 0;
}

/* A prefixed integer's continuation octet (5.1); 1 when it is whole. */
static int int_more(struct ns_hpack *h, uint8_t b)
{
	if (h->shift > 21)
		return -1; /* over 2^28: no header block means that */
	h->num += (uint32_t)(b & 0x7f) << h->shift;
	h->shift = (uint8_t)(h->shift + 7);
	return (b & 0x80) ? 0 : 1;
}

int ns_hpack_feed(struct ns_hpack *h, const uint8_t *p, size_t n, struct ns_hfields *out)
{
	/* the integer in S_INT is a representation's (h->rep says which);
	 * the one in S_STRLEN_MORE a string's length */
	for (size_t i = 0; i < n; i++) {
		uint8_t b = p[i];
		int is_name = h->in_name;
		int r;

		switch (h->st) {
		case S_REP:
			if (rep_start(h, b, out) < 0)
				return -1;
			break;
		case S_INT:
			r = int_more(h, b);
			if (r < 0)
				return -1;
			if (r && int_done(h, out) < 0)
				return -1;
			break;
		case S_STRLEN:
			h->huff = (b & 0x80) != 0;
			h->num = b & 0x7f;
			h->shift = 0;
			string_begin(h, is_name);
			if (h->num == 0x7f) {
				h->st = S_STRLEN_MORE;
				break;
			}
			goto length_known;
		case S_STRLEN_MORE:
			r = int_more(h, b);
			if (r < 0)
				return -1;
			if (!r)
				break;
		length_known:
			h->left = h->num;
			h->st = S_STR;
			if (h->left == 0 && string_end(h, is_name, out) < 0)
				return -1;
			break;
		case S_STR:
			if (h->huff ? huff_octet(h, is_name, b) < 0 : (string_octet(h, is_name, b), 0))
				return -1;
			if (--h->left == 0 && string_end(h, is_name, out) < 0)
				return -1;
			break;
		default:
			return -1;
		}
	}
	return 0;
}

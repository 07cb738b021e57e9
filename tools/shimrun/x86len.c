/* x86len.c -- the length of one x86-64 instruction, and where a direct
 * branch goes (x86len.h).
 *
 * Enough of the instruction set to walk what Go's compiler emits: legacy
 * prefixes, REX, the one-byte map, 0F, 0F38, 0F3A and VEX. Anything else
 * (EVEX, 3DNow!, an opcode invalid in 64-bit mode, a prefix run past 15
 * bytes) is "not known", and the caller refuses the whole function: a
 * function walked wrongly would be patched at a place that is not an
 * instruction's start. */
#include "x86len.h"

#include <string.h>

/* one bit per opcode of a 256-opcode map */
#define B(x) (1u << ((x)&31))
struct map {
	unsigned modrm[8], imm8[8], invalid[8];
};

static int has(const unsigned *set, unsigned op)
{
	return (set[op >> 5] >> (op & 31)) & 1;
}

static void set(unsigned *s, unsigned op)
{
	s[op >> 5] |= B(op);
}

static struct map one, two;
static int made;

static void make_maps(void)
{
	static const unsigned char one_modrm[] = { 0x62, 0x63, 0x69, 0x6b, 0xc0, 0xc1,
						   0xc6, 0xc7, 0xf6, 0xf7, 0xfe, 0xff };
	static const unsigned char one_imm8[] = { 0x6a, 0x6b, 0x80, 0x82, 0x83, 0xa8, 0xc0, 0xc1, 0xc6, 0xcd, 0xd4,
						  0xd5, 0xe4, 0xe5, 0xe6, 0xe7, 0x70, 0xeb, 0xe0, 0xe1, 0xe2, 0xe3 };
	static const unsigned char one_bad[] = { 0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f,
						 0x37, 0x3f, 0x60, 0x61, 0x62, 0x82, 0x9a, 0xce, 0xd4,
						 0xd5, 0xd6, 0xea, 0xc4, 0xc5, 0x8e, 0xf1 };
	static const unsigned char two_none[] = { 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
						  0x0e, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
						  0x77, 0xa0, 0xa1, 0xa2, 0xa8, 0xa9, 0xaa };
	static const unsigned char two_imm8[] = { 0x70, 0x71, 0x72, 0x73, 0xa4, 0xac, 0xba, 0xc2, 0xc4, 0xc5, 0xc6 };

	for (unsigned op = 0; op < 0x40; op++)
		if ((op & 7) < 4)
			set(one.modrm, op); /* ALU r/m forms */
	for (unsigned op = 0x80; op <= 0x8f; op++)
		set(one.modrm, op);
	for (unsigned op = 0xd0; op <= 0xdf; op++)
		if (op != 0xd4 && op != 0xd5 && op != 0xd6 && op != 0xd7)
			set(one.modrm, op);
	for (size_t i = 0; i < sizeof(one_modrm); i++)
		set(one.modrm, one_modrm[i]);
	for (unsigned op = 0; op < 0x40; op++)
		if ((op & 7) == 4)
			set(one.imm8, op);
	for (unsigned op = 0x70; op <= 0x7f; op++)
		set(one.imm8, op);
	for (unsigned op = 0xb0; op <= 0xb7; op++)
		set(one.imm8, op);
	for (size_t i = 0; i < sizeof(one_imm8); i++)
		set(one.imm8, one_imm8[i]);
	for (size_t i = 0; i < sizeof(one_bad); i++)
		set(one.invalid, one_bad[i]);
	memset(two.modrm, 0xff, sizeof(two.modrm));
	for (unsigned op = 0x80; op <= 0x8f; op++)
		two.modrm[op >> 5] &= ~B(op); /* jcc rel32 */
	for (unsigned op = 0xc8; op <= 0xcf; op++)
		two.modrm[op >> 5] &= ~B(op); /* bswap */
	for (size_t i = 0; i < sizeof(two_none); i++)
		two.modrm[two_none[i] >> 5] &= ~B(two_none[i]);
	for (size_t i = 0; i < sizeof(two_imm8); i++)
		set(two.imm8, two_imm8[i]);
	set(two.invalid, 0x0f); /* 3DNow! */
	made = 1;
}

/* the ModRM byte at p and what follows it (SIB, displacement); its length
 * or -1 past end */
static int modrm_len(const unsigned char *p, const unsigned char *end, int addr32)
{
	unsigned mod, rm;
	int n = 1;

	(void)addr32; /* (the same forms in 64-bit mode) */
	if (p >= end)
		return -1;
	mod = p[0] >> 6;
	rm = p[0] & 7;
	if (mod == 3)
		return 1;
	if (rm == 4) {
		if (p + 1 >= end)
			return -1;
		n++;
		if (mod == 0 && (p[1] & 7) == 5)
			n += 4;
	} else if (mod == 0 && rm == 5) {
		n += 4; /* RIP-relative */
	}
	if (mod == 1)
		n += 1;
	else if (mod == 2)
		n += 4;
	return p + n <= end ? n : -1;
}

int ns_x86_insn(const unsigned char *code, size_t avail, struct ns_x86 *out)
{
	const unsigned char *p = code, *end = code + (avail < 15 ? avail : 15);
	int opsize16 = 0, addr32 = 0, rexw = 0, n, imm = 0;
	unsigned op;

	if (!made)
		make_maps();
	memset(out, 0, sizeof(*out));
	for (; p < end; p++) {
		if (*p == 0x66)
			opsize16 = 1;
		else if (*p == 0x67)
			addr32 = 1;
		else if (*p == 0xf0 || *p == 0xf2 || *p == 0xf3 || *p == 0x2e || *p == 0x3e || *p == 0x26 ||
			 *p == 0x36 || *p == 0x64 || *p == 0x65)
			;
		else
			break;
	}
	if (p < end && (*p & 0xf0) == 0x40) {
		rexw = (*p >> 3) & 1;
		p++;
	}
	if (p >= end)
		return -1;
	op = *p++;
	if (op == 0xc4 || op == 0xc5) { /* VEX */
		unsigned mapsel = 1;

		if (op == 0xc4) {
			if (p + 2 > end)
				return -1;
			mapsel = p[0] & 0x1f;
			p += 2;
		} else {
			if (p + 1 > end)
				return -1;
			p += 1;
		}
		if (p >= end || mapsel < 1 || mapsel > 3)
			return -1;
		op = *p++;
		if (mapsel != 1 || has(two.modrm, op)) { /* (vzeroupper: none) */
			if ((n = modrm_len(p, end, addr32)) < 0)
				return -1;
			p += n;
		}
		if (mapsel == 3 || (mapsel == 1 && has(two.imm8, op)))
			p++;
		if (p > end)
			return -1;
		out->len = (int)(p - code);
		return out->len;
	}
	if (op == 0x0f) {
		if (p >= end)
			return -1;
		op = *p++;
		if (op == 0x38 || op == 0x3a) {
			if (p >= end)
				return -1;
			p++;
			if ((n = modrm_len(p, end, addr32)) < 0)
				return -1;
			p += n + (op == 0x3a);
		} else if (has(two.invalid, op)) {
			return -1;
		} else if (op >= 0x80 && op <= 0x8f) {
			out->branch = NS_X86_JCC;
			imm = 4;
		} else {
			if (has(two.modrm, op)) {
				if ((n = modrm_len(p, end, addr32)) < 0)
					return -1;
				p += n;
			}
			if (has(two.imm8, op))
				imm = 1;
		}
	} else {
		if (has(one.invalid, op))
			return -1;
		if (has(one.modrm, op)) {
			unsigned reg = p < end ? (*p >> 3) & 7 : 0;

			if ((n = modrm_len(p, end, addr32)) < 0)
				return -1;
			p += n;
			if (op == 0xf6 && reg < 2)
				imm = 1;
			else if (op == 0xf7 && reg < 2)
				imm = opsize16 ? 2 : 4;
			else if (op == 0xff && (reg == 4 || reg == 5))
				out->branch = NS_X86_INDIRECT;
		}
		if (has(one.imm8, op))
			imm = 1;
		if ((op < 0x40 && (op & 7) == 5) || op == 0x68 || op == 0x69 || op == 0x81 || op == 0xa9 || op == 0xc7)
			imm = opsize16 ? 2 : 4;
		else if (op >= 0xb8 && op <= 0xbf)
			imm = rexw ? 8 : opsize16 ? 2 : 4;
		else if (op >= 0xa0 && op <= 0xa3)
			imm = addr32 ? 4 : 8;
		else if (op == 0xc2 || op == 0xca)
			imm = 2;
		else if (op == 0xc8)
			imm = 3;
		else if (op == 0xe8 || op == 0xe9)
			imm = 4;
		if (op == 0xe8)
			out->branch = NS_X86_CALL;
		else if (op == 0xe9 || op == 0xeb)
			out->branch = NS_X86_JMP;
		else if ((op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3))
			out->branch = NS_X86_JCC;
		else if (op == 0xc3 || op == 0xc2)
			out->branch = NS_X86_RET;
	}
	if (p + imm > end)
		return -1;
	if (out->branch == NS_X86_JCC || out->branch == NS_X86_JMP || out->branch == NS_X86_CALL) {
		int64_t rel = imm == 1
			? (int8_t)p[0]
			: (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);

		out->target = (int64_t)(p + imm - code) + rel;
		out->has_target = 1;
	}
	p += imm;
	out->len = (int)(p - code);
	return out->len;
}

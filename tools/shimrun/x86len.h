/* x86len.h -- one x86-64 instruction's length, and its direct branch's
 * target (x86len.c), for walking a Go function to the places it returns. */
#ifndef NS_X86LEN_H
#define NS_X86LEN_H

#include <stddef.h>
#include <stdint.h>

enum { NS_X86_NONE, NS_X86_JCC, NS_X86_JMP, NS_X86_CALL, NS_X86_RET, NS_X86_INDIRECT };

struct ns_x86 {
	int len;
	int branch;     /* NS_X86_* */
	int has_target; /* a direct branch: */
	int64_t target; /* ...its target, from the instruction's first byte */
};

/* The instruction at code (avail bytes readable): its length, or -1 when
 * it is not one this decoder knows (the caller then trusts nothing past it). */
int ns_x86_insn(const unsigned char *code, size_t avail, struct ns_x86 *out);

#endif

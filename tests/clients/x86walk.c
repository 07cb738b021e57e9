/* x86walk.c -- tools/shimrun/x86len.c's walk of a program's functions,
 * for test_gostatus.py to hold against objdump's: reads "ADDRESS SIZE"
 * lines (hex) on stdin, each a function of FILE's code that starts at
 * file offset TEXT_OFF for address TEXT_ADDR, and prints each
 * instruction's address, or "BAD ADDRESS" where the walker stops.
 *
 *   x86walk FILE TEXT_OFF TEXT_ADDR < functions */
#include <stdio.h>
#include <stdlib.h>

#include "../../tools/shimrun/x86len.h"

int main(int argc, char **argv)
{
	static unsigned char b[1 << 20];
	unsigned long va, n, toff, tva;
	FILE *f;

	if (argc != 4 || !(f = fopen(argv[1], "rb")))
		return 2;
	toff = strtoul(argv[2], NULL, 0);
	tva = strtoul(argv[3], NULL, 0);
	while (scanf("%lx %lx", &va, &n) == 2) {
		if (n > sizeof(b) || va < tva || fseek(f, (long)(toff + (va - tva)), SEEK_SET) < 0 ||
		    fread(b, 1, n, f) != n)
			continue;
		for (unsigned long at = 0; at < n;) {
			struct ns_x86 x;

			if (ns_x86_insn(b + at, n - at, &x) < 0) {
				printf("BAD %#lx\n", va + at);
				break;
			}
			printf("%#lx\n", va + at);
			at += (unsigned long)x.len;
		}
	}
	return 0;
}

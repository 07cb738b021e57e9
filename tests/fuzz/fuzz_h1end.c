/* fuzz_h1end.c -- where an HTTP/1.x answer ends (policy/h1end.c), against
 * itself: the input's first byte chooses HEAD and a split point, the rest
 * is the answer. Fed whole, fed in two pieces at the split, and fed byte
 * by byte, it must give one result; DONE is never reached before the last
 * byte when fed byte by byte; and UNKNOWN, once reached, stays. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../policy/h1end.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ns_h1end whole, two, one;
	const char *b = (const char *)data + 1;
	size_t n, k;
	int head;
	uint32_t r = 0;

	if (size < 1)
		return 0;
	head = data[0] & 1;
	n = size - 1;
	k = n ? (size_t)(data[0] >> 1) % (n + 1) : 0;
	ns_h1end_start(&whole, head);
	ns_h1end_feed(&whole, b, n);
	ns_h1end_start(&two, head);
	ns_h1end_feed(&two, b, k);
	ns_h1end_feed(&two, b + k, n - k);
	ns_h1end_start(&one, head);
	for (size_t i = 0; i < n; i++) {
		uint32_t prev = one.result;

		r = ns_h1end_feed(&one, b + i, 1);
		if (prev == NS_H1E_UNKNOWN && r != NS_H1E_UNKNOWN)
			abort(); /* UNKNOWN is for good */
		if (r == NS_H1E_DONE && i + 1 < n && ns_h1end_feed(&one, b + i + 1, 0) == NS_H1E_DONE) {
			/* an end before the last byte: the next byte must make it UNKNOWN */
			struct ns_h1end copy = one;

			if (ns_h1end_feed(&copy, b + i + 1, 1) != NS_H1E_UNKNOWN)
				abort();
		}
	}
	if (whole.result != two.result || whole.result != one.result)
		abort();
	return 0;
}

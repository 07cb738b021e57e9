/* fuzz_scenario.c -- libFuzzer harness: the scenario parser (shimrun
 * --scenario, NETSHIM_SCENARIO) and its timeline. Any input must parse or
 * fail with file:line errors, never crash, leak or read out of bounds; a
 * timeline that parses must answer for any destination at any time. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/scenario.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static const char *const dests[] = { "api.example.com:443", "203.0.113.7:8080", "[2001:db8::1]:443",
					     "127.0.0.1:1" };
	static const uint64_t times[] = { 0, 1, 999, 10000, 86400000, UINT64_MAX };
	struct ns_scenario s;
	char err[4096], *text = malloc(len + 1);

	if (!text)
		return 0;
	memcpy(text, data, len);
	text[len] = '\0';   /* (the parser reads a C string: an embedded NUL ends it) */
	if (ns_scenario_parse(text, "fuzz.scn", &s, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < sizeof(dests) / sizeof(dests[0]); i++) {
			struct ns_dest d;
			struct ns_faults f;

			if (ns_dest_parse(dests[i], &d) != 0)
				continue;
			for (size_t t = 0; t < sizeof(times) / sizeof(times[0]); t++)
				ns_scenario_match(&s, times[t], &d, &f);
		}
		ns_scenario_free(&s);
	} else if (strncmp(err, "fuzz.scn:", 9) != 0) {
		__builtin_trap();   /* every error names the file */
	}
	free(text);
	return 0;
}

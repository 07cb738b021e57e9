/* seed_table.c -- write a populated table image to stdout: the fuzzer's
 * starting point for fuzz_table (a valid header, claimed slots, events). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../policy/table.h"

int main(void)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_evrec ev;
	char name[64], err[256];
	int i;

	snprintf(name, sizeof(name), "nsseed.%d", (int)getpid());
	if (ns_table_open(name, 1, 4, 4, &t, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "seed_table: %s\n", err);
		return 1;
	}
	s.failure_threshold = 2;
	i = ns_table_find(&t, "api.example.com:443", 1, 1000);
	ns_table_attempt(&t, i, 1, 1000, &s, NULL);
	ns_table_outcome(&t, i, NS_OUT_TIMEOUT, 110, 1000, 5000, &s, NULL);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 1001, 5001, &s, NULL);
	ns_table_latency(&t, i, 0, 1234);
	ns_table_find(&t, "[2001:db8::1]:80", 1, 1000);
	memset(&ev, 0, sizeof(ev));
	ev.type = NS_E_OPENED;
	snprintf(ev.dest, sizeof(ev.dest), "api.example.com:443");
	snprintf(ev.program, sizeof(ev.program), "seed");
	ns_table_event(&t, &ev, 5002);
	fwrite(t.hdr, 1, t.size, stdout);
	ns_table_close(&t);
	unlink(t.path);
	return 0;
}

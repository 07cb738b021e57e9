/* deepbind.c -- load a library with RTLD_DEEPBIND, as PHP loads its
 * extensions, and report what its relocations point to or what its fetch
 * got.
 *
 *   deepbind LIB lazy|now slots NAME@OFFSET...   one line per slot: NAME OBJECT
 *   deepbind LIB lazy|now fetch IP PORT block|poll
 *        one JSON line: {"stage": ..., "errno": "ETIMEDOUT"|"OK", "ms": ...} */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: deepbind LIB lazy|now slots|fetch ...\n");
		return 2;
	}
	int mode = (strcmp(argv[2], "now") == 0 ? RTLD_NOW : RTLD_LAZY) | RTLD_DEEPBIND;
	void *h = dlopen(argv[1], mode);
	struct link_map *lm;

	if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) {
		fprintf(stderr, "deepbind: %s\n", dlerror());
		return 2;
	}
	if (strcmp(argv[3], "slots") == 0) {
		for (int i = 4; i < argc; i++) {
			char *at = strchr(argv[i], '@');
			Dl_info info;
			void *v;

			if (!at)
				return 2;
			*at = 0;
			v = *(void **)(lm->l_addr + strtoul(at + 1, NULL, 16));
			printf("%s %s\n", argv[i], dladdr(v, &info) && info.dli_fname ? info.dli_fname : "?");
		}
		return 0;
	}
	if (strcmp(argv[3], "fetch") == 0 && argc == 7) {
		int (*fetch)(const char *, int, int, int *) = (int (*)(const char *, int, int, int *))dlsym(h, "deep_fetch");
		int stage = 0, e;
		double t0 = now_ms();

		if (!fetch)
			return 2;
		e = fetch(argv[4], atoi(argv[5]), strcmp(argv[6], "poll") == 0, &stage);
		printf("{\"stage\": %d, \"errno\": \"%s\", \"ms\": %.1f}\n", stage, e ? strerrorname_np(e) : "OK",
		       now_ms() - t0);
		return 0;
	}
	return 2;
}

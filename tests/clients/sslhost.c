/* sslhost.c -- loads plugins RTLD_LOCAL (or RTLD_DEEPBIND) and calls each
 * one's plugin_hello() (sslplugin.c), in the order given.
 *
 *   sslhost [--deepbind] PLUGIN.so... -> {"hello_bytes": [N, ...]} on stdout */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	int deep = argc > 1 && !strcmp(argv[1], "--deepbind"), first = 1 + deep;

	printf("{\"hello_bytes\": [");
	for (int i = first; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL | (deep ? RTLD_DEEPBIND : 0));
		int (*hello)(void) = h ? (int (*)(void))dlsym(h, "plugin_hello") : NULL;

		if (!h)
			fprintf(stderr, "%s\n", dlerror());
		printf("%s%d", i > first ? ", " : "", hello ? hello() : -100);
	}
	printf("]}\n");
	return 0;
}

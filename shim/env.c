/* env.c -- the NETSHIM_ variables as the process started with them.
 *
 * The constructor copies them, since the policy and the table are loaded
 * by the first call that needs them, and by then a program may have
 * cleared or rewritten its own environment: clearenv, a sandbox's scrub,
 * or setproctitle (python's module, daemons), which moves the environment
 * away and writes the process title over the strings it started with. */
#include "base.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ENV_KEPT  64
#define ENV_BYTES 8192 /* copied here: a page or two touched, only when there are any */
static const char *env_kept[ENV_KEPT];
static char env_buf[ENV_BYTES];
static int env_state; /* atomic: 0 not yet taken (ask getenv), 1 taken, 2 too many to keep (ask getenv) */

void ns_env_keep(void)
{
	size_t used = 0;
	int n = 0, st = 1;

	for (char **e = environ; e && *e; e++) {
		size_t l;

		if (strncmp(*e, "NETSHIM_", 8) != 0)
			continue;
		l = strlen(*e) + 1;
		if (n == ENV_KEPT || l > ENV_BYTES - used) {
			st = 2;
			break;
		}
		memcpy(env_buf + used, *e, l);
		env_kept[n++] = env_buf + used;
		used += l;
	}
	__atomic_store_n(&env_state, st, __ATOMIC_RELEASE);
}

const char *ns_getenv(const char *name)
{
	size_t len = strlen(name);

	if (__atomic_load_n(&env_state, __ATOMIC_ACQUIRE) != 1)
		return getenv(name); /* before our constructor (another library's), or too many kept */
	for (int i = 0; i < ENV_KEPT && env_kept[i]; i++)
		if (strncmp(env_kept[i], name, len) == 0 && env_kept[i][len] == '=')
			return env_kept[i] + len + 1;
	return NULL;
}

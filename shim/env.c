/* env.c -- the NETSHIM_ variables as the process started with them.
 *
 * The constructor keeps their addresses (the strings the kernel or the
 * parent's exec put there), since the policy and the table are loaded by
 * the first call that needs them, and by then a program may have cleared
 * or rewritten its own environment (clearenv, a sandbox's scrub). */
#include "base.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ENV_KEPT 64
static const char *env_kept[ENV_KEPT];
static int env_state; /* atomic: 0 not yet taken (ask getenv), 1 taken, 2 more than ENV_KEPT (ask getenv) */

void ns_env_keep(void)
{
	int n = 0, st = 1;

	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "NETSHIM_", 8) != 0)
			continue;
		if (n == ENV_KEPT) {
			st = 2;
			break;
		}
		env_kept[n++] = *e;
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

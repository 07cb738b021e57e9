/* trace.c -- the calling code behind a failure, through libunwind.
 *
 * Off by default and free when off: libunwind is opened with dlopen the
 * first time a trace is taken, so a program that never traces never loads
 * it, and nothing here is on the data path. Any failure to load or unwind
 * just yields no frames. */
#include "trace.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "lock.h"
#include "settings.h"

static struct {
	int (*getcontext)(unw_context_t *);
	int (*init_local)(unw_cursor_t *, unw_context_t *);
	int (*step)(unw_cursor_t *);
	int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
	int (*get_proc_name)(unw_cursor_t *, char *, size_t, unw_word_t *);
} unw;
static uint64_t unw_once; /* lock.h: a handler inside its own thread's set-up does without */
static void *self_base;

/* Naming a frame reads symbol tables and is the slow part (tens of
 * microseconds); a program fails from the same few call sites over and
 * over, so names are cached by address: 4-way, so that two frames of one
 * stack whose addresses hash alike do not evict each other on every trace
 * (direct-mapped, they did: a trace went from 5 to 60 us when a build
 * moved one function). */
#define NAME_CACHE 256   /* entries: 64 sets of 4 */
#define NAME_WAYS 4
struct name_ent { unw_word_t ip; char text[150]; };
static struct name_ent *name_cache;   /* NAME_CACHE entries, mapped with libunwind (NULL: no cache) */
static unsigned name_victim;   /* under name_lock: the way replaced next */

static unsigned name_set(unw_word_t ip)
{
	return (unsigned)(((uint64_t)ip * 0x9e3779b97f4a7c15ULL) >> 58) * NAME_WAYS;   /* 64 sets */
}
static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;

static void name_prepare(void) { pthread_mutex_lock(&name_lock); }
static void name_parent(void) { pthread_mutex_unlock(&name_lock); }
static void name_child(void) { pthread_mutex_init(&name_lock, NULL); }

static void unw_load(void)
{
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
	Dl_info info = { 0 };

	if (dladdr((void *)&unw_load, &info))
		self_base = info.dli_fbase;
	/* a fork while another thread holds the name lock would leave it held
	 * in the child */
	(void)ns_fork_hook(name_prepare, name_parent, name_child);
	ns_lazy_map((void **)&name_cache, NAME_CACHE * sizeof(*name_cache));
	if (!h) {
		NS_LOG(NS_LOG_WARN, "tracing is on but libunwind.so.8 cannot be loaded: %s", dlerror());
		return;
	}
	unw.getcontext = (int (*)(unw_context_t *))dlsym(h, "_Ux86_64_getcontext");
	unw.init_local = (int (*)(unw_cursor_t *, unw_context_t *))dlsym(h, "_ULx86_64_init_local");
	unw.step = (int (*)(unw_cursor_t *))dlsym(h, "_ULx86_64_step");
	unw.get_reg = (int (*)(unw_cursor_t *, unw_regnum_t, unw_word_t *))dlsym(h, "_ULx86_64_get_reg");
	unw.get_proc_name = (int (*)(unw_cursor_t *, char *, size_t, unw_word_t *))dlsym(h, "_ULx86_64_get_proc_name");
	if (!unw.getcontext || !unw.init_local || !unw.step || !unw.get_reg || !unw.get_proc_name) {
		NS_LOG(NS_LOG_WARN, "tracing is on but libunwind.so.8 lacks the local unwinder");
		memset(&unw, 0, sizeof(unw));
	}
}

unsigned ns_trace_frames(char frames[][150], unsigned max)
{
	unw_context_t ctx;
	unw_cursor_t cur;
	unsigned n = 0;
	int saved = errno, depth = 0;

	ns_once(&unw_once, unw_load);
	if (!unw.step || unw.getcontext(&ctx) != 0 || unw.init_local(&cur, &ctx) != 0)
		goto out;
	while (n < max && depth++ < 64 && unw.step(&cur) > 0) {
		char name[96] = "?";
		unw_word_t ip = 0, off = 0;
		const char *obj = "?", *slash;
		Dl_info info = { 0 };
		unsigned h;
		int hit;

		if (unw.get_reg(&cur, UNW_REG_IP, &ip) != 0 || ip == 0)
			break;
		h = name_set(ip);
		hit = 0;
		if (!ns_mutex_take(&name_lock, NS_LOCK_TRACE))
			break;   /* a handler's failure inside its own thread's trace: no frames */
		for (unsigned w = 0; name_cache && w < NAME_WAYS && !hit; w++) {
			if (name_cache[h + w].ip == ip) {
				memcpy(frames[n], name_cache[h + w].text, 150);
				hit = 1;
			}
		}
		ns_mutex_give(&name_lock, NS_LOCK_TRACE);
		if (hit) {
			if (frames[n][0])
				n++;
			continue;
		}
		if (dladdr((void *)ip, &info)) {
			if (info.dli_fbase == self_base) {
				frames[n][0] = '\0';   /* the shim's own frame: cached as skipped */
				goto out_cache;
			}
			if (info.dli_fname) {
				slash = strrchr(info.dli_fname, '/');
				obj = slash ? slash + 1 : info.dli_fname;
			}
		}
		if (unw.get_proc_name(&cur, name, sizeof(name), &off) != 0 && info.dli_sname) {
			snprintf(name, sizeof(name), "%s", info.dli_sname);
			off = ip - (unw_word_t)info.dli_saddr;
		}
		snprintf(frames[n], 150, "%s+0x%lx (%s)", name, (unsigned long)off, obj);
out_cache:
		if (!ns_mutex_take(&name_lock, NS_LOCK_TRACE))
			break;
		if (name_cache) {
			unsigned w = 0;

			while (w < NAME_WAYS && name_cache[h + w].ip)
				w++;
			if (w == NAME_WAYS)
				w = name_victim++ % NAME_WAYS;
			name_cache[h + w].ip = ip;
			memcpy(name_cache[h + w].text, frames[n], 150);
		}
		ns_mutex_give(&name_lock, NS_LOCK_TRACE);
		if (frames[n][0])
			n++;
	}
out:
	errno = saved;
	return n;
}

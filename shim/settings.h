/* settings.h -- kept settings values (settings.c). */
#ifndef NS_SETTINGS_H
#define NS_SETTINGS_H

#include "../policy/policy.h"
#include "base.h"

/* settings.c: the kept copy of s's value (its faults left out), the same
 * pointer for equal values; NULL when NS_SETTINGS_KEPT_MAX are kept. */
#define NS_SETTINGS_KEPT_MAX 65536u
#define NS_SETTINGS_RESERVE 64u     /* kept back for the fallbacks (one per policy loaded) */
NS_HIDDEN const struct ns_settings *ns_settings_intern(const struct ns_settings *s);
/* *pp, mapped (len bytes, zeroed) on first use: an anonymous mapping,
 * published by compare-and-swap (a thread that loses unmaps its own), so
 * that the library's own data stays small (a conservative collector in the
 * host scans every loaded object's data on each collection). NULL if it
 * cannot be mapped. */
NS_HIDDEN void *ns_lazy_map(void **pp, size_t len);
/* ...or, when that is NULL, what fallback() gives (a kept value, made when
 * first needed: the destination is governed by it rather than not at all;
 * the built-in settings if it gives NULL), *full set. */
NS_HIDDEN const struct ns_settings *ns_settings_keep(const struct ns_settings *s,
						     const struct ns_settings *(*fallback)(void), int *full);
/* ns_settings_intern that may take the reserve. */
NS_HIDDEN const struct ns_settings *ns_settings_intern_reserve(const struct ns_settings *s);

#endif

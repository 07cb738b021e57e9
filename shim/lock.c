/* lock.c -- the per-thread word of the locks this thread holds (lock.h). */
#include "lock.h"

__thread unsigned ns_locks_held __attribute__((tls_model("initial-exec")));

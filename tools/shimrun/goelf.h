/* goelf.h -- a Go program's version, one function's code and its return
 * sites, read from its file (goelf.c), for the hook that reads net/http's
 * answers (gohook.c). */
#ifndef NS_GOELF_H
#define NS_GOELF_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define NS_GOELF_MAX_FUNC  65536
#define NS_GOELF_MAX_SITES 48

struct ns_gosite {
	uint32_t off; /* the epilogue moved: its first byte from the function's, */
	uint32_t len; /* ...and its length (ending in the ret) */
};

struct ns_goelf {
	char version[32]; /* "go1.19.8" */
	int minor;        /* 19, or -1 */
	int is_go;        /* it has a .gopclntab */
	dev_t dev;        /* the file read: its identity */
	ino_t ino;
	off_t fsize;
	struct timespec mtime, ctime;
	uint64_t entry;                        /* e_entry (a PIE's load bias: AT_ENTRY less this) */
	uint64_t addr;                         /* the function's link address, */
	uint64_t size;                         /* ...its length, */
	unsigned char code[NS_GOELF_MAX_FUNC]; /* ...and its bytes */
	unsigned entry_len; /* its first instruction, moved to the entry's trampoline (0: no entry hook) */
	unsigned nsites;
	struct ns_gosite site[NS_GOELF_MAX_SITES];
};

/* Read path's Go version and function func (a .gopclntab name) with its
 * return sites into g: 0, or -1 with why (one clause) filled. */
int ns_goelf_read(const char *path, const char *func, struct ns_goelf *g, char *why, size_t wl);

#endif

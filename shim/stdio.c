/* stdio.c -- sockets read through stdio (fdopen): the deadline the kernel
 * enforced is reported as a timeout and counted.
 *
 * glibc's stdio fills its buffer with an internal read the wrappers never
 * see. On a blocking governed socket the shim's deadline is in the kernel
 * (SO_RCVTIMEO), so it still fires, but stdio hands the program EAGAIN and
 * no outcome is counted (busybox wget reads its socket so). These wrappers
 * let the stdio call run as it would, and when it returns on a governed
 * socket give the data path's after-the-call step what the internal read
 * saw: bytes (the answer began), end of stream, or a failure, whose EAGAIN
 * from the shim's kernel timeout becomes ETIMEDOUT, counted once. Any
 * other stream costs one array lookup on its descriptor.
 *
 * Covered: the fgets, fread, getc, getline families (with their _unlocked
 * and fortified forms) and __uflow, which the getc_unlocked macro calls to
 * refill. Not covered: fscanf and its kin, and writes through stdio (a
 * send deadline in fflush stays EAGAIN). */

/* glibc's headers define some of these names as inline functions and
 * macros when optimising; this file defines the real ones. */
#define __NO_INLINE__ 1

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

#include "afterio.h"
#include "conn.h"
#include "real.h"

/* What the stdio call did, in the data path's terms: it delivered bytes
 * (got), and it came back short (failed): a failure (ferror; errno says
 * which) or the end of the stream (feof). errno is left as the data path
 * answers: ETIMEDOUT for the shim's kernel timeout, else as it was. */
static void seen(FILE *fp, int fd, struct ns_conn *c, uint32_t gen, int got, int failed)
{
	int e = errno;

	if (got)
		ns_after_io(fd, c, NS_IN, 1, 1, 0, gen);
	if (failed && ferror(fp)) {
		errno = e;
		ns_after_io(fd, c, NS_IN, -1, 1, 0, gen);
		return;
	}
	if (failed && feof(fp))
		ns_after_io(fd, c, NS_IN, 0, 1, 0, gen);
	errno = e;
}

/* One wrapper: find libc's function on first use, call it, and when the
 * stream is a governed socket pass on what happened. ok: did the call
 * deliver data, did it come back short? */
#define NS_STDIO(ret, name, params, args, ok, shortfall) \
	ret name params; \
	__attribute__((visibility("default"))) ret name params \
	{ \
		static ret (*real) params; \
		ret (*fn) params = __atomic_load_n(&real, __ATOMIC_RELAXED); \
		struct ns_conn *c; \
		uint32_t gen = 0; \
		ret r; \
		if (unlikely(!fn)) { \
			fn = (ret (*) params)dlsym(RTLD_NEXT, #name); \
			if (!fn) { \
				errno = ENOSYS; \
				return (ret)0; \
			} \
			__atomic_store_n(&real, fn, __ATOMIC_RELAXED); \
		} \
		c = ns_conn_of(fp ? fp->_fileno : -1); \
		if (likely(!c)) \
			return fn args; \
		gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED); \
		r = fn args; \
		seen(fp, fp->_fileno, c, gen, (ok), (shortfall)); \
		return r; \
	}

NS_STDIO(char *, fgets, (char *s, int n, FILE *fp), (s, n, fp), r != NULL, r == NULL)
NS_STDIO(char *, fgets_unlocked, (char *s, int n, FILE *fp), (s, n, fp), r != NULL, r == NULL)
NS_STDIO(char *, __fgets_chk, (char *s, size_t size, int n, FILE *fp), (s, size, n, fp), r != NULL, r == NULL)
NS_STDIO(char *, __fgets_unlocked_chk, (char *s, size_t size, int n, FILE *fp), (s, size, n, fp), r != NULL, r == NULL)
NS_STDIO(size_t, fread, (void *p, size_t size, size_t n, FILE *fp), (p, size, n, fp), r > 0, r < n)
NS_STDIO(size_t, fread_unlocked, (void *p, size_t size, size_t n, FILE *fp), (p, size, n, fp), r > 0, r < n)
NS_STDIO(size_t, __fread_chk, (void *p, size_t psize, size_t size, size_t n, FILE *fp), (p, psize, size, n, fp), r > 0, r < n)
NS_STDIO(size_t, __fread_unlocked_chk, (void *p, size_t psize, size_t size, size_t n, FILE *fp), (p, psize, size, n, fp), r > 0, r < n)
NS_STDIO(int, fgetc, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(int, getc, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(int, _IO_getc, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(int, fgetc_unlocked, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(int, getc_unlocked, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(int, __uflow, (FILE *fp), (fp), r != EOF, r == EOF)
NS_STDIO(ssize_t, getline, (char **line, size_t *cap, FILE *fp), (line, cap, fp), r > 0, r < 0)
NS_STDIO(ssize_t, getdelim, (char **line, size_t *cap, int delim, FILE *fp), (line, cap, delim, fp), r > 0, r < 0)
NS_STDIO(ssize_t, __getdelim, (char **line, size_t *cap, int delim, FILE *fp), (line, cap, delim, fp), r > 0, r < 0)

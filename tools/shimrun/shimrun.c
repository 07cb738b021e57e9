/* shimrun.c -- check the policy, preload the shim, exec the program. */
#include <elf.h>
#include <err.h>
#include <fcntl.h>
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/policy.h"
#include "../../policy/polimage.h"
#include "../../policy/scenario.h"
#include "../../policy/table.h"
#include "goexec.h"
#include "supervise.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shimrun [--policy FILE] [--table NAME] [--inject 'DEST=FAULTS']... [--scenario FILE]\n"
		"               [--engine preload|seccomp|auto] -- COMMAND [ARG...]\n"
		"\n"
		"engines: preload (LD_PRELOAD: every socket call, HTTP status, TLS plaintext, faults);\n"
		"seccomp (shimrun answers the program's connect() calls and watches the connections:\n"
		"breakers, cooldowns, retry_budget, max_connections, rate on new connections, the\n"
		"connect deadline, and read and total deadlines that reset a connection; for programs\n"
		"LD_PRELOAD cannot reach. It does not see bytes, HTTP status or TLS, paces no request\n"
		"on a kept-alive connection, and injects no faults); auto (the default): seccomp for\n"
		"a statically linked or Go program, else preload\n");
}

#define SCENARIO_TEXT_MAX (64 * 1024)   /* it travels in the environment */

/* --scenario FILE: checked here with the library's own parser (errors are
 * FILE:LINE, exit 2); the program gets its text in NETSHIM_SCENARIO and
 * the run's start (CLOCK_MONOTONIC, which every process of the machine
 * shares) in NETSHIM_SCENARIO_T0, set just before the exec. */
static char *scenario_read(const char *path)
{
	static char text[SCENARIO_TEXT_MAX + 1];
	char errs[8192];
	struct ns_scenario s;
	ssize_t n;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		err(2, "--scenario %s", path);
	while ((n = read(fd, text + got, sizeof(text) - got)) > 0)
		got += (size_t)n;
	if (n < 0)
		err(2, "--scenario %s", path);
	close(fd);
	if (got > SCENARIO_TEXT_MAX)
		errx(2, "%s: longer than %d bytes", path, SCENARIO_TEXT_MAX);
	text[got] = '\0';
	if (strlen(text) != got)
		errx(2, "%s: not a text file (a NUL byte)", path);
	if (ns_scenario_parse(text, path, &s, errs, sizeof(errs)) > 0) {
		fputs(errs, stderr);
		fprintf(stderr, "shimrun: %s: scenario has errors; not starting\n", path);
		exit(2);
	}
	if (s.n == 0)
		errx(2, "%s: the scenario has no line (AT DEST FAULTS, such as '10s api.example.com:443 refuse')",
		     path);
	fprintf(stderr, "shimrun: injecting faults in this run: scenario %s, %d lines over %llu ms\n", path, s.n,
		(unsigned long long)ns_scenario_end(&s));
	ns_scenario_free(&s);
	return text;
}

/* What LD_PRELOAD cannot reach, as shimrun tells it. */
/* REACH_UNREAD: executable, but not readable by shimrun (execute-only):
 * what it is cannot be told, and the kernel makes it non-dumpable at exec */
enum { REACH_OK, REACH_STATIC, REACH_GO, REACH_SETID, REACH_UNREAD };
enum { ENGINE_AUTO, ENGINE_PRELOAD, ENGINE_SECCOMP };

/* Does the ELF file fd (header eh) have a section named .note.go.buildid
 * or .go.buildinfo, which every Go toolchain writes? Go's net package makes
 * its system calls itself, cgo or not, so LD_PRELOAD governs none of them. */
static int go_binary(int fd, const Elf64_Ehdr *eh)
{
	size_t nsh = eh->e_shnum, tlen = nsh * sizeof(Elf64_Shdr);
	Elf64_Shdr *sh = NULL;
	char *names = NULL;
	int go = 0;

	/* the section headers in one read, their names in another (a read a
	 * section was ~70 system calls at every start) */
	if (eh->e_shentsize != sizeof(Elf64_Shdr) || nsh == 0 || nsh >= 65280 || eh->e_shstrndx >= nsh ||
	    !(sh = malloc(tlen)) || pread(fd, sh, tlen, (off_t)eh->e_shoff) != (ssize_t)tlen ||
	    sh[eh->e_shstrndx].sh_size == 0 || sh[eh->e_shstrndx].sh_size > (1u << 20) ||
	    !(names = malloc(sh[eh->e_shstrndx].sh_size + 1)) ||
	    pread(fd, names, sh[eh->e_shstrndx].sh_size, (off_t)sh[eh->e_shstrndx].sh_offset) !=
		    (ssize_t)sh[eh->e_shstrndx].sh_size)
		goto out;
	names[sh[eh->e_shstrndx].sh_size] = '\0';
	for (size_t i = 0; i < nsh && !go; i++) {
		const char *name = names + sh[i].sh_name;

		if (sh[i].sh_name >= sh[eh->e_shstrndx].sh_size)
			continue;
		go = strcmp(name, ".note.go.buildid") == 0 || strcmp(name, ".go.buildinfo") == 0;
	}
out:
	free(names);
	free(sh);
	return go;
}

/* Can LD_PRELOAD reach the program (found as execvp would)? Not an ELF
 * file without an interpreter (statically linked), nor a Go program. shimrun
 * says so rather than let it run ungoverned in silence. Anything
 * unreadable or not ELF (a script) is REACH_OK. */
static char found[PATH_MAX]; /* the program's file, as reach() found it */
static int found_elf;        /* ...an ELF program (not a script) */

static int reach(const char *prog)
{
	char path[PATH_MAX];
	const char *p = getenv("PATH");
	Elf64_Ehdr eh;
	int fd = -1, r = REACH_OK;

	if (strchr(prog, '/')) {
		fd = open(prog, O_RDONLY | O_CLOEXEC);
	} else {
		for (const char *d = p ? p : "/usr/bin:/bin"; fd < 0 && *d;) {
			size_t n = strcspn(d, ":");

			if ((size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)n, n ? d : ".", prog) < sizeof(path) &&
			    access(path, X_OK) == 0)
				fd = open(path, O_RDONLY | O_CLOEXEC);
			d += n + (d[n] == ':');
		}
	}
	if (fd < 0)
		return errno == EACCES ? REACH_UNREAD : REACH_OK;
	snprintf(found, sizeof(found), "%s", strchr(prog, '/') ? prog : path);
	if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0) {
		Elf64_Phdr ph[64];
		size_t n = eh.e_phnum < 64 ? eh.e_phnum : 64;

		/* the program headers in one read: an interpreter among them is a
		 * dynamically linked program (one that cannot be read is taken
		 * for one: LD_PRELOAD is tried) */
		r = REACH_STATIC;
		found_elf = 1;
		if (eh.e_phnum > 64 || pread(fd, ph, n * sizeof(*ph), (off_t)eh.e_phoff) != (ssize_t)(n * sizeof(*ph)))
			r = REACH_OK;
		for (size_t i = 0; r == REACH_STATIC && i < n; i++)
			if (ph[i].p_type == PT_INTERP)
				r = REACH_OK;
		if (go_binary(fd, &eh))
			r = REACH_GO;
	}
	{
		/* set-user or set-group ID: LD_PRELOAD is ignored, and under the
		 * seccomp engine's filter (no_new_privs) it would lose its rights */
		struct stat st;

		if (fstat(fd, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
			r = REACH_SETID;
	}
	close(fd);
	return r;
}

/* The library beside this binary (build tree) or in ../lib/netshim
 * (installed), as an absolute path; NETSHIM_LIB overrides both. */
#ifndef NS_LIBDIR
#define NS_LIBDIR "/usr/local/lib"
#endif

static int find_lib(char *out, size_t len)
{
	const char *env = getenv("NETSHIM_LIB");
	char self[PATH_MAX], cand[PATH_MAX + 64], *dir;
	static const char *const rel[] = { "libnetshim.so", "../lib/netshim/libnetshim.so" };
	ssize_t n;

	if (env && *env)
		return realpath(env, out) ? 0 : -1;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return -1;
	self[n] = '\0';
	dir = dirname(self);   /* cuts self in place: computed once */
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(cand, sizeof(cand), "%s/%s", dir, rel[i]);
		if (access(cand, R_OK) == 0 && realpath(cand, out))
			return 0;
	}
	/* where make install (LIBDIR) put it: the multiarch directory of the
	 * Debian package */
	if (access(NS_LIBDIR "/netshim/libnetshim.so", R_OK) == 0 && realpath(NS_LIBDIR "/netshim/libnetshim.so", out))
		return 0;
	(void)len;
	return -1;
}

/* What one run of shimrun was asked to do. */
struct run {
	char **argv;                /* the program and its arguments */
	char *inject, *scenario;    /* --inject's lines, --scenario's text */
	const char *policy, *table; /* --policy, --table (or NULL) */
	int engine;                 /* ENGINE_* */
	int disabled;               /* NETSHIM_DISABLE=1 */
	char lib[PATH_MAX];         /* libnetshim.so, when have_lib */
	int have_lib;
	const char *old_preload; /* LD_PRELOAD as it came */
};

/* The options into o: -1 to go on, else the exit status (--help, a usage
 * error). A bad --inject or --engine stops it here (exit 2). */
static int read_options(int argc, char **argv, struct run *o)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' },
		{ "table", required_argument, NULL, 't' },
		{ "inject", required_argument, NULL, 'i' },
		{ "scenario", required_argument, NULL, 's' },
		{ "engine", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "+p:t:i:s:e:h", opts, NULL)) != -1) {
		switch (c) {
		case 'i': {
			/* checked here with the library's own parser; the program
			 * gets them, one per line, in NETSHIM_INJECT */
			struct ns_section pat;
			struct ns_faults f;
			char why[300], *next;

			if (strchr(optarg, '\n') || ns_inject_parse(optarg, &pat, &f, why, sizeof(why)) < 0)
				errx(2, "--inject: %s", strchr(optarg, '\n') ? "one DEST=FAULTS per --inject" : why);
			if (asprintf(&next, "%s%s%s", o->inject ? o->inject : "", o->inject ? "\n" : "", optarg) < 0)
				err(2, "out of memory");
			free(o->inject);
			o->inject = next;
			break;
		}
		case 's':
			if (o->scenario)
				errx(2, "--scenario: one scenario per run");
			o->scenario = scenario_read(optarg);
			break;
		case 'e':
			if (strcmp(optarg, "preload") == 0)
				o->engine = ENGINE_PRELOAD;
			else if (strcmp(optarg, "seccomp") == 0)
				o->engine = ENGINE_SECCOMP;
			else if (strcmp(optarg, "auto") == 0)
				o->engine = ENGINE_AUTO;
			else
				errx(2, "--engine %s: preload, seccomp or auto", optarg);
			break;
		case 'p':
			o->policy = optarg;
			break;
		case 't':
			o->table = optarg;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	o->argv = argv + optind;
	return -1;
}

/* The policy (--policy, else NETSHIM_POLICY or the default path) loads,
 * and the program will be told its absolute path; the table's name is one
 * a process can open. 0, or 2 said: a bad one stops the run, rather than
 * run the program ungoverned. */
static int checked_policy_and_table(struct run *o)
{
	char abspol[PATH_MAX], errs[8192];
	const char *t;

	if (!o->policy)
		o->policy = ns_policy_path();
	if (o->policy && *o->policy) {
		struct ns_policy p;
		int mapped;

		/* (as the library will read it: by its real path, its compiled
		 * image when there is one; policy/polimage.h) */
		if (!realpath(o->policy, abspol))
			err(2, "%s", o->policy);
		if (ns_policy_load_shared(abspol, &p, errs, sizeof(errs), &mapped) != 0) {
			fputs(errs, stderr);
			fprintf(stderr, "shimrun: %s: policy has errors; not starting %s\n", o->policy, o->argv[0]);
			return 2;
		}
		ns_policy_free(&p);
		setenv("NETSHIM_POLICY", abspol, 1);
	}
	if (o->table) {
		if (!ns_table_name_ok(o->table))
			errx(2, "--table %s: use a plain file name", o->table);
		setenv("NETSHIM_TABLE", o->table, 1);
	}
	o->disabled = getenv("NETSHIM_DISABLE") && strcmp(getenv("NETSHIM_DISABLE"), "1") == 0;
	/* a table that exists but is damaged or another user's keeps the
	 * library's fail-safe answer (one line, calls passed through) */
	t = getenv("NETSHIM_TABLE");
	if (!o->disabled && t && *t && !ns_table_name_ok(t)) {
		fprintf(stderr, "shimrun: NETSHIM_TABLE=%s: bad table name: use a plain file name; not starting %s\n",
			t, o->argv[0]);
		return 2;
	}
	return 0;
}

/* The program's environment: its faults (NETSHIM_INJECT after any it
 * had), its scenario and when it starts, the library first in LD_PRELOAD. */
static void environment(struct run *o)
{
	char *preload = o->lib;

	if (o->inject) {
		const char *prev = getenv("NETSHIM_INJECT");
		char *all = o->inject;

		if (prev && *prev && asprintf(&all, "%s\n%s", prev, o->inject) < 0)
			err(2, "out of memory");
		setenv("NETSHIM_INJECT", all, 1);
	}
	o->have_lib = find_lib(o->lib, sizeof(o->lib)) == 0;
	o->old_preload = getenv("LD_PRELOAD");
	if (o->have_lib && o->old_preload && *o->old_preload && asprintf(&preload, "%s %s", o->lib, o->old_preload) < 0)
		err(2, "out of memory");
	if (o->have_lib)
		setenv("LD_PRELOAD", preload, 1);
	if (o->scenario) {
		struct timespec ts;
		char t0[32];

		clock_gettime(CLOCK_MONOTONIC, &ts);
		snprintf(t0, sizeof(t0), "%llu", (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
		setenv("NETSHIM_SCENARIO", o->scenario, 1);
		setenv("NETSHIM_SCENARIO_T0", t0, 1);
	}
}

/* Why the library cannot reach a program that runs under it anyway. */
static void said_unreached(const char *prog, int r)
{
	if (r == REACH_UNREAD)
		fprintf(stderr,
			"shimrun: %s cannot be read by shimrun (execute-only?): whether LD_PRELOAD reaches it "
			"cannot be told, and the kernel makes such a program non-dumpable, so the seccomp engine "
			"could not act on it either: it may run ungoverned (run shimrun as its owner or root)\n",
			prog);
	else if (r == REACH_SETID)
		fprintf(stderr,
			"shimrun: %s is set-user or set-group ID: LD_PRELOAD is ignored, and the seccomp "
			"engine would take its rights, so netshim will not govern it\n",
			prog);
	else if (r == REACH_STATIC)
		fprintf(stderr,
			"shimrun: %s is statically linked: LD_PRELOAD cannot reach into it, "
			"so netshim will not govern it (--engine seccomp governs its connects)\n",
			prog);
	else if (r == REACH_GO)
		fprintf(stderr,
			"shimrun: %s is a Go program: Go makes its network system calls itself, "
			"even when dynamically linked, so netshim will not govern it (--engine seccomp governs its "
			"connects)\n",
			prog);
}

/* The seccomp engine runs the program: its exit status, or -1 when the
 * engine could not start (said: the program then runs under the library). */
static int seccomp_run(struct run *o, int r)
{
	char why[256], go[160], first[PATH_MAX];
	int rc, hooked = r == REACH_GO && found[0] && !ns_goexec_off() && ns_goexec_probe(found, go, sizeof(go)) == 1;

	/* the program's connects are shimrun's to answer: not the library's
	 * too (a dynamic program would be counted twice) */
	if (o->old_preload && *o->old_preload)
		setenv("LD_PRELOAD", o->old_preload, 1);
	else
		unsetenv("LD_PRELOAD");
	fprintf(stderr,
		"shimrun: %s%s: governed by the seccomp engine (its connects and their deadlines, "
		"caps and pacing; %s%s%s)\n",
		o->argv[0],
		r == REACH_STATIC       ? " (statically linked)"
			: r == REACH_GO ? " (a Go program)"
					: "",
		hooked ? "HTTP status and Retry-After read from net/http, " : "", hooked ? go : "",
		hooked ? "; not its bytes or TLS" : "not its bytes, HTTP status or TLS");
	/* (a program that is not Go: its first exec needs no stop in shimrun) */
	if (!found_elf || r == REACH_GO || !realpath(found, first))
		first[0] = '\0';
	rc = ns_sup_run(o->argv, first[0] ? first : NULL, getenv("NETSHIM_POLICY"), o->table, why, sizeof(why));
	if (rc < 0)
		fprintf(stderr, "shimrun: %s; %s runs ungoverned\n", why, o->argv[0]);
	return rc;
}

/* The engine that reaches the program: seccomp's, or the library's (the
 * program exec'd in shimrun's place). */
static int run(struct run *o)
{
	int r = reach(o->argv[0]), rc, e;
	int seccomp = o->engine == ENGINE_SECCOMP || (o->engine == ENGINE_AUTO && (r == REACH_STATIC || r == REACH_GO));

	/* (the seccomp engine needs no library: only the preload one does) */
	if (!o->have_lib && (o->disabled || r == REACH_SETID || !seccomp))
		errx(2, "cannot find libnetshim.so (set NETSHIM_LIB)");
	if (!o->disabled && r != REACH_SETID && seccomp) {
		if ((rc = seccomp_run(o, r)) >= 0)
			return rc;
	} else {
		said_unreached(o->argv[0], r);
	}
	execvp(o->argv[0], o->argv);
	e = errno;
	warn("%s", o->argv[0]);
	return e == ENOENT ? 127 : 126;
}

/* shimrun [OPTIONS] -- PROGRAM [ARGS]: read the options, stop on a bad
 * policy or table, give the program its environment, run it under the
 * engine that reaches it. */
int main(int argc, char **argv)
{
	struct run o = { .engine = ENGINE_AUTO };
	int rc;

	if ((rc = read_options(argc, argv, &o)) >= 0)
		return rc;
	if ((rc = checked_policy_and_table(&o)) != 0)
		return rc;
	environment(&o);
	return run(&o);
}

/* deepbind.c -- libraries loaded with RTLD_DEEPBIND see the wrappers too.
 *
 * A library dlopen()ed with RTLD_DEEPBIND (PHP loads every extension so)
 * resolves its undefined symbols in its own dependencies first: its
 * connect, poll and recv bind to libc and the preloaded shim never sees
 * them. The shim wraps dlopen; after a DEEPBIND load it walks the objects
 * that load brought in and rewrites each relocation slot (GOT entry) that
 * names a symbol the shim exports to the shim's wrapper, which is what
 * the global lookup order would have bound it to without the flag.
 *
 * Why this and not the alternatives:
 *  - an LD_AUDIT module (la_symbind64) would need LD_AUDIT in the
 *    environment, so a plain LD_PRELOAD (the common case) would still
 *    escape, and it is called for every binding of every object;
 *  - stripping RTLD_DEEPBIND changes how the library resolves its own
 *    symbols (the reason PHP asks for it).
 * Rewriting works for lazy and `-z now` objects alike (a RELRO page is made
 * writable for the write and read-only again) and costs one pass over the
 * new objects' relocations, at dlopen time only.
 *
 * dlopen uses its return address to find the caller (its namespace, its
 * DT_RPATH, $ORIGIN), so the exported dlopen is a two-instruction stub that
 * jumps to libc's with the caller's frame untouched unless the mode has
 * RTLD_DEEPBIND; only then does the C code below run. Out of reach:
 * dlmopen() namespaces (their objects use another copy of libc, with its
 * own errno, so the wrappers must not be spliced in), and dlsym() on a
 * DEEPBIND handle, which still finds libc's function. */

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

/* libc's dlopen: set once before the stub can jump through it. */
NS_HIDDEN __attribute__((used)) void *(*ns_real_dlopen)(const char *, int);
NS_HIDDEN __attribute__((used)) void *ns_dlopen_deep(const char *file, int mode);
NS_HIDDEN __attribute__((used)) void ns_dlopen_bind(void);

/* The exported dlopen. RTLD_DEEPBIND is 0x8 (bits/dlfcn.h); the mode is
 * the second argument (%esi). An unbound pointer (a dlopen from another
 * library's constructor, before ours ran) is bound first, with the
 * argument registers kept, so even that call reaches libc as the caller's. */
_Static_assert(RTLD_DEEPBIND == 0x8, "the stub tests bit 3");
__asm__(
	".text\n"
	".globl dlopen\n"
	".type dlopen, @function\n"
	"dlopen:\n"
	"	.cfi_startproc\n"
	"	endbr64\n"
	"	testl $8, %esi\n"
	"	jnz ns_dlopen_deep\n"
	"	movq ns_real_dlopen(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	jmp *%rax\n"
	"1:	pushq %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	pushq %rsi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	subq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	call ns_dlopen_bind\n"
	"	addq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rsi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	jmp *ns_real_dlopen(%rip)\n"
	"	.cfi_endproc\n"
	".size dlopen, .-dlopen\n");

static pthread_once_t bind_once = PTHREAD_ONCE_INIT;

static void bind_real(void)
{
	void *p = dlsym(RTLD_NEXT, "dlopen");

	__atomic_store_n(&ns_real_dlopen, (void *(*)(const char *, int))p, __ATOMIC_RELEASE);
}

void ns_dlopen_bind(void)
{
	pthread_once(&bind_once, bind_real);
}

/**** the shim's own symbol table ****/

/* The shim's exported functions, looked up by name in its own GNU hash
 * table: the version script is the one list, and a lookup costs a hash and
 * a bloom-filter test for the thousands of names that are not ours. */
static struct {
	ElfW(Addr) base;
	const ElfW(Sym) *sym;
	const char *str;
	const uint32_t *gnu;
} self;

static pthread_once_t self_once = PTHREAD_ONCE_INIT;

/* glibc stores the dynamic section's addresses already relocated; an
 * object whose section is read-only keeps them relative to its base. */
static uintptr_t dyn_ptr(ElfW(Addr) base, ElfW(Addr) p)
{
	return p < base ? base + p : p;
}

static void self_init(void)
{
	Dl_info info;
	struct link_map *lm = NULL;

	if (!dladdr1((void *)&ns_dlopen_bind, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return;
	for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_SYMTAB)
			self.sym = (const ElfW(Sym) *)dyn_ptr(lm->l_addr, d->d_un.d_ptr);
		else if (d->d_tag == DT_STRTAB)
			self.str = (const char *)dyn_ptr(lm->l_addr, d->d_un.d_ptr);
		else if (d->d_tag == DT_GNU_HASH)
			self.gnu = (const uint32_t *)dyn_ptr(lm->l_addr, d->d_un.d_ptr);
	}
	self.base = lm->l_addr;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

/* The address of the shim's exported function called name, or 0. */
static ElfW(Addr) self_lookup(const char *name)
{
	const uint32_t *g = self.gnu;
	uint32_t nbuckets = g[0], symoff = g[1], bloom_n = g[2], shift = g[3];
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)&g[4];
	const uint32_t *buckets = (const uint32_t *)&bloom[bloom_n];
	const uint32_t *chain = &buckets[nbuckets];
	const unsigned bits = sizeof(ElfW(Addr)) * 8;
	uint32_t h = gnu_hash(name), i;
	ElfW(Addr) word = bloom[(h / bits) % bloom_n];
	ElfW(Addr) mask = ((ElfW(Addr))1 << (h % bits)) | ((ElfW(Addr))1 << ((h >> shift) % bits));

	if ((word & mask) != mask)
		return 0;
	i = buckets[h % nbuckets];
	if (i < symoff)
		return 0;
	for (;; i++) {
		const ElfW(Sym) *s = &self.sym[i];
		uint32_t hi = chain[i - symoff];

		if ((h | 1) == (hi | 1) && s->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s->st_info) == STT_FUNC &&
		    ELF64_ST_BIND(s->st_info) == STB_GLOBAL && strcmp(name, self.str + s->st_name) == 0)
			return self.base + s->st_value;
		if (hi & 1)
			return 0;
	}
}

/**** rewriting one object ****/

struct obj {
	ElfW(Addr) base;
	const ElfW(Phdr) *phdr;
	ElfW(Half) phnum;
	const ElfW(Dyn) *dyn;
};

struct relocs {
	const ElfW(Rela) *rela;
	size_t n;
};

struct pass {
	unsigned objects;         /* objects rewritten */
	unsigned slots;           /* slots rewritten */
	unsigned failed;          /* slots left (a RELRO page would not turn writable) */
};

/* The object's RELRO range, page-aligned, or len 0. */
static void relro_of(const struct obj *o, uintptr_t *start, size_t *len)
{
	long pg = sysconf(_SC_PAGESIZE);

	*len = 0;
	for (ElfW(Half) i = 0; i < o->phnum; i++) {
		if (o->phdr[i].p_type != PT_GNU_RELRO)
			continue;
		uintptr_t s = o->base + o->phdr[i].p_vaddr;
		uintptr_t e = s + o->phdr[i].p_memsz;

		*start = s & ~(uintptr_t)(pg - 1);
		*len = ((e + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1)) - *start;
		return;
	}
}

/* Is addr in a writable segment of the object, or in its RELRO range
 * (which the rewrite makes writable for the write)? Slots anywhere else (an
 * object with text relocations) are left alone. */
static int in_data(const struct obj *o, uintptr_t addr, uintptr_t ro, size_t rolen)
{
	if (rolen && addr >= ro && addr + sizeof(ElfW(Addr)) <= ro + rolen)
		return 1;
	for (ElfW(Half) i = 0; i < o->phnum; i++) {
		const ElfW(Phdr) *ph = &o->phdr[i];
		uintptr_t s = o->base + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && addr >= s &&
		    addr + sizeof(ElfW(Addr)) <= s + ph->p_memsz)
			return 1;
	}
	return 0;
}

/* Walk the object's relocations against symbols the shim exports. With
 * write 0: count the slots that differ (and how many lie in RELRO); with
 * write 1: store the wrappers' addresses. */
static unsigned walk(const struct obj *o, const struct relocs *rs, size_t nrs, const ElfW(Sym) *symtab,
		     const char *strtab, size_t strsz, int write, uintptr_t ro, size_t rolen, unsigned *in_ro)
{
	unsigned n = 0;

	for (size_t k = 0; k < nrs; k++) {
		for (size_t i = 0; i < rs[k].n; i++) {
			const ElfW(Rela) *r = &rs[k].rela[i];
			unsigned type = ELF64_R_TYPE(r->r_info), si = ELF64_R_SYM(r->r_info);
			const ElfW(Sym) *s;
			ElfW(Addr) to, *slot;

			if (si == 0 || (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64))
				continue;
			s = &symtab[si];
			if (s->st_shndx != SHN_UNDEF || s->st_name >= strsz)
				continue;   /* the object's own definition stays its own */
			to = self_lookup(strtab + s->st_name);
			if (!to)
				continue;
			if (type == R_X86_64_64)
				to += (ElfW(Addr))r->r_addend;
			slot = (ElfW(Addr) *)(o->base + r->r_offset);
			if (!in_data(o, (uintptr_t)slot, ro, rolen))
				continue;   /* a text relocation: its page is not ours to write */
			if (__atomic_load_n(slot, __ATOMIC_RELAXED) == to)
				continue;
			n++;
			if (!write) {
				if (rolen && (uintptr_t)slot >= ro && (uintptr_t)slot < ro + rolen)
					(*in_ro)++;
				continue;
			}
			/* a word store: a thread calling through the slot sees the
			 * old target or the new one, both callable */
			__atomic_store_n(slot, to, __ATOMIC_RELAXED);
		}
	}
	return n;
}

static void rewrite(const struct obj *o, struct pass *p)
{
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	size_t strsz = 0, relasz = 0, pltsz = 0;
	const ElfW(Rela) *rela = NULL, *jmprel = NULL;
	long pltrel = DT_RELA;
	uintptr_t ro = 0;
	size_t rolen;
	unsigned in_ro = 0, n;

	for (const ElfW(Dyn) *d = o->dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(o->base, d->d_un.d_ptr); break;
		case DT_STRTAB: strtab = (const char *)dyn_ptr(o->base, d->d_un.d_ptr); break;
		case DT_STRSZ: strsz = d->d_un.d_val; break;
		case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(o->base, d->d_un.d_ptr); break;
		case DT_RELASZ: relasz = d->d_un.d_val; break;
		case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(o->base, d->d_un.d_ptr); break;
		case DT_PLTRELSZ: pltsz = d->d_un.d_val; break;
		case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
		default: break;
		}
	}
	if (!symtab || !strtab || pltrel != DT_RELA)
		return;
	struct relocs rs[2] = {
		{ rela, rela ? relasz / sizeof(ElfW(Rela)) : 0 },
		{ jmprel, jmprel ? pltsz / sizeof(ElfW(Rela)) : 0 },
	};
	relro_of(o, &ro, &rolen);
	n = walk(o, rs, 2, symtab, strtab, strsz, 0, ro, rolen, &in_ro);
	if (!n)
		return;
	if (in_ro && mprotect((void *)ro, rolen, PROT_READ | PROT_WRITE) < 0) {
		ns_log(NS_LOG_WARN, "DEEPBIND: cannot make a RELRO page writable (%s); %u calls of one library stay unseen",
		       strerror(errno), n);
		p->failed += n;
		return;
	}
	walk(o, rs, 2, symtab, strtab, strsz, 1, ro, rolen, NULL);
	if (in_ro)
		mprotect((void *)ro, rolen, PROT_READ);
	p->objects++;
	p->slots += n;
}

/* The objects the load brought in: from the handle's own map to the end of
 * the list (a load appends). An object already there before is rewritten
 * too; its slots were bound to the wrappers anyway, so nothing changes.
 * All of it runs inside dl_iterate_phdr, whose lock keeps the list still
 * (dlclose unlinks under it) and lets one rewrite run at a time, so no
 * RELRO page is made read-only under another thread's write. */
#define NS_DEEP_MAX 256
struct walkset {
	struct link_map *from;
	int built;
	unsigned n;
	ElfW(Addr) base[NS_DEEP_MAX];
	const char *name[NS_DEEP_MAX];
	struct pass pass;
};

static int rewrite_each(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct walkset *w = arg;
	struct obj o = { info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, NULL };

	(void)size;
	if (!w->built) {
		w->built = 1;
		for (struct link_map *m = w->from; m && w->n < NS_DEEP_MAX; m = m->l_next) {
			if (m->l_addr == self.base)
				continue;
			w->base[w->n] = m->l_addr;
			w->name[w->n++] = m->l_name;
		}
	}
	for (unsigned i = 0; i < w->n; i++) {
		if (w->base[i] != info->dlpi_addr || w->name[i] != info->dlpi_name)
			continue;
		for (ElfW(Half) k = 0; k < o.phnum; k++)
			if (o.phdr[k].p_type == PT_DYNAMIC)
				o.dyn = (const ElfW(Dyn) *)(o.base + o.phdr[k].p_vaddr);
		if (o.dyn)
			rewrite(&o, &w->pass);
		break;
	}
	return 0;
}

/* The C side of the stub: a load with RTLD_DEEPBIND. errno and dlerror()
 * are what libc's dlopen left. */
void *ns_dlopen_deep(const char *file, int mode)
{
	void *caller = __builtin_return_address(0);
	struct link_map *lm = NULL, *cm = NULL;
	Lmid_t ns = LM_ID_BASE;
	Dl_info info;
	void *h;
	int e;

	ns_dlopen_bind();
	/* a caller in another namespace loads there, as libc would have it;
	 * the shim is not in that namespace, so nothing is rewritten */
	if (dladdr1(caller, &info, (void **)&cm, RTLD_DL_LINKMAP) && cm && dlinfo(cm, RTLD_DI_LMID, &ns) == 0 &&
	    ns != LM_ID_BASE)
		return dlmopen(ns, file, mode);
	h = ns_real_dlopen(file, mode);
	if (!h || !ns_shim_active())
		return h;
	e = errno;
	pthread_once(&self_once, self_init);
	if (self.gnu && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
		struct walkset w = { .from = lm };
		monotime t0 = ns_now();

		dl_iterate_phdr(rewrite_each, &w);
		NS_LOG(NS_LOG_INFO, "dlopen(%s, RTLD_DEEPBIND): %u calls in %u objects rebound to the shim in %lld us%s",
		       file ? file : "(main program)", w.pass.slots, w.pass.objects,
		       (long long)(ns_now() - t0) / 1000, w.pass.failed ? " (some left: see above)" : "");
	}
	errno = e;
	return h;
}

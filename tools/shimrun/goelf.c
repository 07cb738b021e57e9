/* goelf.c -- what a Go executable says of itself, read from its file
 * (goelf.h): its Go version (.go.buildinfo), a function's bytes found by
 * name through .gopclntab (which stripping keeps), and the places that
 * function returns (walked instruction by instruction: x86len.c).
 *
 * Everything read here is the program's file: untrusted. Each offset and
 * length is checked against the file before it is used; anything that does
 * not match what Go 1.18-1.23 write is a refusal with its reason, never a
 * guess. */
#include "goelf.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "x86len.h"

struct file {
	const unsigned char *b;
	size_t n;
};

static int in(const struct file *f, uint64_t off, uint64_t len)
{
	return off <= f->n && len <= f->n - off;
}

static uint64_t u64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static uint32_t u32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* the section whose name ends with suffix (".gopclntab" is
 * ".data.rel.ro.gopclntab" in a PIE) */
static const Elf64_Shdr *section(const struct file *f, const char *suffix)
{
	const Elf64_Ehdr *e = (const Elf64_Ehdr *)f->b;
	const Elf64_Shdr *sh, *str;
	size_t sl = strlen(suffix);

	if (e->e_shentsize != sizeof(Elf64_Shdr) || !in(f, e->e_shoff, (uint64_t)e->e_shnum * sizeof(Elf64_Shdr)) ||
	    e->e_shstrndx >= e->e_shnum)
		return NULL;
	sh = (const Elf64_Shdr *)(f->b + e->e_shoff);
	str = &sh[e->e_shstrndx];
	if (!in(f, str->sh_offset, str->sh_size))
		return NULL;
	for (unsigned i = 0; i < e->e_shnum; i++) {
		const char *name;
		size_t nl;

		if (sh[i].sh_name >= str->sh_size || sh[i].sh_type == SHT_NOBITS ||
		    !in(f, sh[i].sh_offset, sh[i].sh_size))
			continue;
		name = (const char *)f->b + str->sh_offset + sh[i].sh_name;
		nl = strnlen(name, str->sh_size - sh[i].sh_name);
		if (nl >= sl && memcmp(name + nl - sl, suffix, sl) == 0)
			return &sh[i];
	}
	return NULL;
}

/* Go 1.18 and later keep the version inline in .go.buildinfo: the magic,
 * pointer size, flags (bit 2: inline), then a varint length and the text */
static int version(const struct file *f, struct ns_goelf *g)
{
	const Elf64_Shdr *s = section(f, ".go.buildinfo");
	const unsigned char *p;
	uint64_t len = 0;
	unsigned shift = 0, i = 32;

	if (!s || s->sh_size < 33)
		return -1;
	p = f->b + s->sh_offset;
	if (memcmp(p, "\xff Go buildinf:", 14) != 0 || !(p[15] & 2))
		return -1;
	for (; i < s->sh_size && shift < 28; i++, shift += 7) {
		len |= (uint64_t)(p[i] & 0x7f) << shift;
		if (!(p[i] & 0x80))
			break;
	}
	i++;
	if (len == 0 || len >= sizeof(g->version) || i + len > s->sh_size)
		return -1;
	memcpy(g->version, p + i, len);
	g->version[len] = 0;
	if (sscanf(g->version, "go1.%d", &g->minor) != 1)
		g->minor = -1;
	return 0;
}

/* the function called name: its address and its bytes' place in the file */
static int function(const struct file *f, const char *name, struct ns_goelf *g, char *why, size_t wl)
{
	const Elf64_Shdr *s = section(f, "gopclntab"), *text = section(f, ".text");
	const unsigned char *t;
	uint64_t nfunc, textstart, nameoff, pcln, sz;
	uint32_t magic;
	size_t nl = strlen(name);

	if (!s) {
		snprintf(why, wl, "no .gopclntab section (not a Go program, or one this does not read)");
		return -1;
	}
	t = f->b + s->sh_offset;
	sz = s->sh_size;
	if (sz < 64 || ((magic = u32(t)) != 0xfffffff0u && magic != 0xfffffff1u) || t[7] != 8 || t[6] != 1) {
		snprintf(why, wl, ".gopclntab of a layout this does not read (Go before 1.18?)");
		return -1;
	}
	nfunc = u64(t + 8);
	textstart = u64(t + 24);
	nameoff = u64(t + 32);
	pcln = u64(t + 64);
	if (!textstart && text)
		textstart = text->sh_addr; /* (a PIE's is relocated at load: 0 in the file) */
	if (nameoff >= sz || pcln >= sz || nfunc >= (sz - pcln) / 8) {
		snprintf(why, wl, ".gopclntab's header is out of its section");
		return -1;
	}
	for (uint64_t i = 0; i < nfunc; i++) {
		const unsigned char *ft = t + pcln + 8 * i;
		uint64_t fo = pcln + u32(ft + 4), no;

		if (fo + 8 > sz)
			continue;
		no = nameoff + (uint32_t)u32(t + fo + 4);
		if (no + nl + 1 > sz || memcmp(t + no, name, nl + 1) != 0)
			continue;
		g->addr = textstart + u32(ft);
		g->size = (uint64_t)u32(ft + 8) - u32(ft);
		if (u32(t + fo) != u32(ft) || g->size == 0 || g->size > NS_GOELF_MAX_FUNC) {
			snprintf(why, wl, "%s: its entry in .gopclntab does not hold", name);
			return -1;
		}
		return 0;
	}
	snprintf(why, wl, "no function %s in .gopclntab", name);
	return -1;
}

/* the file offset of vaddr..vaddr+len through the program headers */
static int file_off(const struct file *f, uint64_t vaddr, uint64_t len, uint64_t *off)
{
	const Elf64_Ehdr *e = (const Elf64_Ehdr *)f->b;
	const Elf64_Phdr *ph;

	if (e->e_phentsize != sizeof(Elf64_Phdr) || !in(f, e->e_phoff, (uint64_t)e->e_phnum * sizeof(Elf64_Phdr)))
		return -1;
	ph = (const Elf64_Phdr *)(f->b + e->e_phoff);
	for (unsigned i = 0; i < e->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) && vaddr >= ph[i].p_vaddr &&
		    vaddr + len <= ph[i].p_vaddr + ph[i].p_filesz) {
			*off = ph[i].p_offset + (vaddr - ph[i].p_vaddr);
			return in(f, *off, len) ? 0 : -1;
		}
	return -1;
}

/* Go's prologue under the register ABI: the stack check against g (R14),
 * directly or through R12 for a frame past the small one */
static int prologue_ok(const unsigned char *c, uint64_t n)
{
	static const unsigned char cmp_r14[] = { 0x49, 0x3b, 0x66, 0x10 };
	static const unsigned char cmp_r12[] = { 0x4d, 0x3b, 0x66, 0x10 };

	if (n >= 4 && memcmp(c, cmp_r14, 4) == 0)
		return 1;
	if (n >= 12 && c[0] == 0x4c && c[1] == 0x8d && c[2] == 0xa4 && c[3] == 0x24 && memcmp(c + 8, cmp_r12, 4) == 0)
		return 1;
	return n >= 9 && c[0] == 0x4c && c[1] == 0x8d && c[2] == 0x64 && c[3] == 0x24 && memcmp(c + 5, cmp_r12, 4) == 0;
}

/* One instruction of an epilogue that may be moved elsewhere unchanged:
 * it reads only the stack and registers (mov rbp,[rsp+d]; add rsp,imm;
 * pop rbp). Its length, or 0. */
static int epilogue_insn(const unsigned char *c, size_t n)
{
	if (n >= 8 && c[0] == 0x48 && c[1] == 0x8b && c[2] == 0xac && c[3] == 0x24)
		return 8;
	if (n >= 5 && c[0] == 0x48 && c[1] == 0x8b && c[2] == 0x6c && c[3] == 0x24)
		return 5;
	if (n >= 7 && c[0] == 0x48 && c[1] == 0x81 && c[2] == 0xc4)
		return 7;
	if (n >= 4 && c[0] == 0x48 && c[1] == 0x83 && c[2] == 0xc4)
		return 4;
	if (n >= 1 && c[0] == 0x5d)
		return 1;
	{
		/* a NOP the assembler put for alignment (Go 1.21: between pop rbp and ret) */
		size_t p = 0;
		struct ns_x86 x;

		while (p < n && p < 8 && (c[p] == 0x66 || c[p] == 0x2e))
			p++;
		if (p < n && (c[p] == 0x90 || (p + 1 < n && c[p] == 0x0f && c[p + 1] == 0x1f)) &&
		    ns_x86_insn(c, n, &x) > 0)
			return x.len;
	}
	return 0;
}

/* Walk the function: every return site is the epilogue that ends in its
 * ret, taken back to at least 5 bytes (a jmp rel32), no branch of the
 * function landing inside it. */
static int sites(struct ns_goelf *g, const unsigned char *c, char *why, size_t wl)
{
	uint64_t n = g->size;
	static uint32_t starts[NS_GOELF_MAX_FUNC / 8], targets[NS_GOELF_MAX_FUNC / 8];
	unsigned ns = 0, nt = 0;

	g->nsites = 0;
	if (!prologue_ok(c, n)) {
		snprintf(why, wl, "its prologue is not Go's register-ABI stack check");
		return -1;
	}
	/* its first instruction moves to the entry's trampoline when it is the
	 * lea r12,[rsp+d] of a large frame (5 bytes at least; position-free) */
	g->entry_len = c[3] == 0x24 && c[2] == 0xa4 ? 8 : c[3] == 0x24 && c[2] == 0x64 ? 5 : 0;
	for (uint64_t at = 0; at < n;) {
		struct ns_x86 x;

		if (ns_x86_insn(c + at, n - at, &x) < 0) {
			/* the function's padding after its last instruction */
			uint64_t k = at;

			while (k < n && c[k] == 0xcc)
				k++;
			if (k == n)
				break;
			snprintf(why, wl, "an instruction at +%#llx this does not decode", (unsigned long long)at);
			return -1;
		}
		if (ns < sizeof(starts) / sizeof(starts[0]))
			starts[ns++] = (uint32_t)at;
		if (x.has_target && x.branch != NS_X86_CALL && (int64_t)at + x.target >= 0 &&
		    (uint64_t)((int64_t)at + x.target) < n && nt < sizeof(targets) / sizeof(targets[0]))
			targets[nt++] = (uint32_t)((int64_t)at + x.target);
		if (x.branch == NS_X86_RET && c[at] == 0xc3) {
			/* back over the epilogue's instructions */
			unsigned k = ns - 1, first = k;
			uint32_t from = (uint32_t)at;

			while (k > 0 && at + 1 - starts[k - 1] <= 16 &&
			       epilogue_insn(c + starts[k - 1], at - starts[k - 1]) ==
				       (int)(starts[k] - starts[k - 1])) {
				k--;
				from = starts[k];
				if (at + 1 - from >= 5)
					break;
			}
			(void)first;
			if (at + 1 - from < 5) {
				snprintf(why, wl, "a return at +%#llx without an epilogue of 5 bytes to move",
					 (unsigned long long)at);
				return -1;
			}
			if (g->nsites >= NS_GOELF_MAX_SITES) {
				snprintf(why, wl, "more than %d returns", NS_GOELF_MAX_SITES);
				return -1;
			}
			g->site[g->nsites].off = from;
			g->site[g->nsites].len = (uint32_t)(at + 1 - from);
			g->nsites++;
		}
		at += (uint64_t)x.len;
	}
	for (unsigned j = 0; j < nt; j++)
		if (targets[j] > 0 && targets[j] < g->entry_len)
			g->entry_len = 0; /* (a branch inside it: no entry hook, no latency) */
	for (unsigned i = 0; i < g->nsites; i++)
		for (unsigned j = 0; j < nt; j++)
			if (targets[j] > g->site[i].off && targets[j] < g->site[i].off + g->site[i].len) {
				snprintf(why, wl, "a branch lands inside the epilogue at +%#x", g->site[i].off);
				return -1;
			}
	if (!g->nsites) {
		snprintf(why, wl, "no return found");
		return -1;
	}
	return 0;
}

int ns_goelf_read(const char *path, const char *func, struct ns_goelf *g, char *why, size_t wl)
{
	struct file f;
	struct stat st;
	uint64_t off;
	int fd, rc = -1;
	void *m;

	memset(g, 0, sizeof(*g));
	g->minor = -1;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 ||
	    st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		snprintf(why, wl, "cannot read it");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	g->dev = st.st_dev;
	g->ino = st.st_ino;
	g->fsize = st.st_size;
	g->mtime = st.st_mtim;
	g->ctime = st.st_ctim;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(why, wl, "cannot map it");
		return -1;
	}
	f.b = m;
	f.n = (size_t)st.st_size;
	if (memcmp(f.b, ELFMAG, SELFMAG) != 0 || f.b[EI_CLASS] != ELFCLASS64 ||
	    ((const Elf64_Ehdr *)f.b)->e_machine != EM_X86_64) {
		snprintf(why, wl, "not an x86-64 ELF program (other architectures are not done yet)");
		goto out;
	}
	g->entry = ((const Elf64_Ehdr *)f.b)->e_entry;
	rc = version(&f, g);
	g->is_go = rc == 0 || section(&f, "gopclntab") != NULL;
	if (rc < 0) {
		rc = -1;
		snprintf(why, wl, "%s", g->is_go ? "no Go version in .go.buildinfo" : "not a Go program");
		goto out;
	}
	rc = -1;
	if (g->minor != 19 && (g->minor < 21 || g->minor > 23)) {
		snprintf(why, wl, "Go version %s is not one whose net/http this knows (1.19, 1.21-1.23)", g->version);
		goto out;
	}
	if (function(&f, func, g, why, wl) < 0)
		goto out;
	if (file_off(&f, g->addr, g->size, &off) < 0) {
		snprintf(why, wl, "%s is outside the program's code", func);
		goto out;
	}
	memcpy(g->code, f.b + off, g->size);
	if (sites(g, g->code, why, wl) < 0)
		goto out;
	rc = 0;
out:
	munmap(m, f.n);
	return rc;
}

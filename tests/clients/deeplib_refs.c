/* deeplib_refs.c -- every function netshim exports, referenced the three
 * ways a library can: called through its PLT (JUMP_SLOT), its address
 * loaded from the GOT (GLOB_DAT), and its address stored in data
 * (R_X86_64_64). The test reads these relocations with readelf, never with
 * the shim's own code, and checks each slot points into the shim after a
 * RTLD_DEEPBIND load. No header is included: the names are only symbols.
 * The linker folds a PLT call into a GOT slot the object already has, so
 * the calls are built into one library and (with -DDEEP_ADDRS) the
 * addresses into another. */

/* clang-format off */
#define DEEP_NAMES(X) \
	X(socket) X(connect) X(send) X(sendto) X(sendmsg) X(recv) X(recvfrom) X(recvmsg) \
	X(read) X(write) X(readv) X(writev) X(__recv_chk) X(__recvfrom_chk) X(__read_chk) \
	X(close) X(dup) X(dup2) X(dup3) X(fcntl) X(fcntl64) X(ioctl) X(setsockopt) X(getsockopt) \
	X(getpeername) X(shutdown) \
	X(execve) X(execv) X(execvp) X(execvpe) X(fexecve) X(execveat) X(execl) X(execlp) X(execle) \
	X(getaddrinfo) X(gethostbyname) X(gethostbyname2) X(gethostbyname_r) X(gethostbyname2_r) \
	X(poll) X(ppoll) X(__poll_chk) X(__ppoll_chk) X(select) X(pselect) \
	X(epoll_ctl) X(epoll_wait) X(epoll_pwait) X(epoll_pwait2) \
	X(close_range) X(closefrom) X(fclose) X(accept) X(accept4) \
	X(recvmmsg) X(sendmmsg) X(sendfile) X(sendfile64) X(splice) \
	X(dlopen) X(syscall) X(vfork) X(__vfork) \
	X(fgets) X(fgets_unlocked) X(__fgets_chk) X(__fgets_unlocked_chk) \
	X(fread) X(fread_unlocked) X(__fread_chk) X(__fread_unlocked_chk) \
	X(fgetc) X(getc) X(_IO_getc) X(fgetc_unlocked) X(getc_unlocked) X(__uflow) \
	X(getline) X(getdelim) X(__getdelim) \
	X(SSL_read) X(SSL_write) X(SSL_read_ex) X(SSL_write_ex) X(gnutls_record_recv) X(gnutls_record_send) \
	X(SSL_connect) X(SSL_do_handshake) X(gnutls_certificate_verify_peers2) X(gnutls_certificate_verify_peers3)
/* clang-format on */

#define DECL(n) extern void deep_ref_##n(void) __asm__(#n);
DEEP_NAMES(DECL)

#ifdef DEEP_ADDRS
/* R_X86_64_64: addresses stored in data */
#define ADDR(n) (void *)deep_ref_##n,
void *deep_addrs[] = { DEEP_NAMES(ADDR) };

/* GLOB_DAT: addresses loaded through the GOT */
#define GOT(n) __asm__ volatile("movq " #n "@GOTPCREL(%%rip), %%rax" ::: "rax");
void deep_got_refs(void);
void deep_got_refs(void) { DEEP_NAMES(GOT) }

#else
/* JUMP_SLOT: calls through the PLT (never made) */
#define PLT(n) "call " #n "@PLT\n"
void deep_plt_refs(void);
void deep_plt_refs(void) { __asm__ volatile(DEEP_NAMES(PLT)); }
#endif

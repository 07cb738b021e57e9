/* sslplugin.c -- a plugin with a private OpenSSL, as Python wheels ship one
 * (auditwheel renames libssl to libssl-<hash>.so) and vendor SDKs do: the
 * test links it against a renamed copy of libssl, and sslhost loads it
 * RTLD_LOCAL. plugin_hello() starts a client handshake into a memory BIO
 * pair: SSL_write must reach the plugin's own OpenSSL, which writes a
 * ClientHello into the BIO. Returns the bytes it wrote there (0 or less:
 * the real SSL_write never ran). */
#include <openssl/ssl.h>

int plugin_hello(void);

int plugin_hello(void)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl;
	BIO *rb, *wb;
	int n;

	if (!ctx)
		return -1;
	ssl = SSL_new(ctx);
	rb = BIO_new(BIO_s_mem());
	wb = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, rb, wb);
	SSL_set_connect_state(ssl);
	SSL_write(ssl, "GET / HTTP/1.1\r\n\r\n", 18);   /* wants the handshake first: WANT_READ */
	n = (int)BIO_pending(wb);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return n;
}

/* fuzz_table.c -- libFuzzer harness: shimctl reading a hostile table file.
 *
 * The input becomes /dev/shm/<name> (mode 0600, ours), and shimctl's own
 * commands read it: status (text and JSON), events (text and JSON) and
 * metrics. Nothing in the file is to be trusted; whatever it holds, shimctl
 * must refuse it with a reason or print it, never crash or read out of
 * bounds. tests/fuzz/run.sh seeds the corpus with a real, populated table
 * (seed_table.c) and lets inputs be as long as one, so mutations start
 * from a whole, valid table. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../tools/shimctl/shimctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char tname[64], tpath[128];

static void drop_table(void)
{
	unlink(tpath);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(tname, sizeof(tname), "nsfuzz.%d", (int)getpid());
	snprintf(tpath, sizeof(tpath), "/dev/shm/%s", tname);
	atexit(drop_table);
	if (!freopen("/dev/null", "w", stdout))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	int fd;

	unlink(tpath);
	fd = open(tpath, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		abort();
	if (len && write(fd, data, len) != (ssize_t)len)
		abort();
	close(fd);
	ctl_cmd_status(tname, 0, NULL);
	ctl_cmd_status(tname, 1, NULL);
	ctl_cmd_events(tname, 0, 0, NULL);
	ctl_cmd_events(tname, 1, 0, NULL);
	ctl_cmd_metrics(tname);
	return 0;
}

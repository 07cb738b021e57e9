/* shimctl.c -- the command line: options, and which command file runs. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/table.h"
#include "shimctl.h"

#ifndef NETSHIM_VERSION
#define NETSHIM_VERSION "unknown"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shimctl [--table NAME] status [--json] [DEST]\n"
		"       shimctl [--table NAME] reset DEST | --all\n"
		"       shimctl [--table NAME] open DEST\n"
		"       shimctl [--table NAME] events [--json] [--follow] [DEST]\n"
		"       shimctl [--table NAME] watch\n"
		"       shimctl [--table NAME] metrics\n"
		"       shimctl [--table NAME] check [--install] [--fleet] FILE...\n"
		"       shimctl [--policy FILE] explain DEST\n"
		"       shimctl [--table NAME] inject DEST FAULTS [--for DURATION] [--existing]\n"
		"       shimctl [--table NAME] inject --clear DEST | --clear --all\n"
		"       shimctl [--table NAME] [--policy FILE] faults [--json]\n"
		"       shimctl history [DEST] | backtest CANDIDATE.conf | suggest [DEST] [--keep 99.9%%]\n"
		"               | report --html FILE   each with [--history FILE] [--since SPAN] [--json]\n"
		"       shimctl --help | --version\n");
}

/* The command: the first word that is neither an option nor its value. */
static const char *command_word(int argc, char **argv)
{
	static const char *const valued[] = { "-t", "--table", "-p", "--policy", "-F", "--for", "--history", "--since",
					      "--keep", "--html", NULL };

	for (int i = 1; i < argc; i++) {
		if (argv[i][0] != '-')
			return argv[i];
		for (int k = 0; valued[k]; k++)
			if (strcmp(argv[i], valued[k]) == 0) {
				i++;
				break;
			}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, 'f' },
		{ "table", required_argument, NULL, 't' },
		{ "policy", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "for", required_argument, NULL, 'F' },
		{ "clear", no_argument, NULL, 'c' },
		{ "existing", no_argument, NULL, 'e' },
		{ "install", no_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ "fleet", no_argument, NULL, 'L' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *table = NULL, *policy = NULL, *cmd, *name, *for_text = NULL;
	char def[64];
	int json = 0, all = 0, follow = 0, clear = 0, existing = 0, install = 0, fleet = 0, c, nargs;

	/* the history's commands take options of their own */
	cmd = command_word(argc, argv);
	if (cmd && (!strcmp(cmd, "history") || !strcmp(cmd, "backtest") || !strcmp(cmd, "suggest") ||
		    !strcmp(cmd, "report")))
		return ctl_history_main(argc, argv);

	while ((c = getopt_long(argc, argv, "ft:p:jahVF:ce", opts, NULL)) != -1) {
		switch (c) {
		case 'f': follow = 1; break;
		case 't': table = optarg; break;
		case 'p': policy = optarg; break;
		case 'j': json = 1; break;
		case 'a': all = 1; break;
		case 'F': for_text = optarg; break;
		case 'c': clear = 1; break;
		case 'e': existing = 1; break;
		case 'I':
			install = 1;
			break;
		case 'L':
			fleet = 1;
			break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("shimctl %s (table version %u)\n", NETSHIM_VERSION, NS_TABLE_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	nargs = argc - optind;
	name = ctl_table_name(table, def, sizeof(def));
	if (strcmp(cmd, "status") == 0 && nargs <= 1)
		return ctl_cmd_status(name, json, nargs ? argv[optind] : NULL);
	if (strcmp(cmd, "reset") == 0 && ((all && nargs == 0) || (!all && nargs == 1)))
		return ctl_cmd_reset(name, all, all ? NULL : argv[optind]);
	if (strcmp(cmd, "open") == 0 && nargs == 1)
		return ctl_cmd_open(name, argv[optind]);
	if (strcmp(cmd, "events") == 0 && nargs <= 1)
		return ctl_cmd_events(name, json, follow, nargs ? argv[optind] : NULL);
	if (strcmp(cmd, "metrics") == 0 && nargs == 0)
		return ctl_cmd_metrics(name);
	if (strcmp(cmd, "watch") == 0 && nargs == 0)
		return ctl_cmd_watch(name);
	if (strcmp(cmd, "check") == 0 && nargs >= 1)
		return ctl_cmd_check(argv + optind, nargs, install, fleet ? name : NULL);
	if (strcmp(cmd, "explain") == 0 && nargs == 1)
		return ctl_cmd_explain(policy, argv[optind]);
	if (strcmp(cmd, "inject") == 0 && !clear && !all && nargs == 2)
		return ctl_cmd_inject(name, nargs, argv + optind, for_text, existing, 0, 0);
	if (strcmp(cmd, "inject") == 0 && clear && !for_text && !existing &&
	    ((all && nargs == 0) || (!all && nargs == 1)))
		return ctl_cmd_inject(name, nargs, argv + optind, NULL, 0, 1, all);
	if (strcmp(cmd, "faults") == 0 && nargs == 0)
		return ctl_cmd_faults(name, policy, json);
	usage(stderr);
	return 2;
}

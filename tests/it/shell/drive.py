"""Drives lakestream-cli's interactive shell through a pseudo-terminal, as a
person at a keyboard would: typing statements over several lines, backslash
commands, a streaming query cancelled with Ctrl-C, and quitting.

Usage: drive.py CLI WAREHOUSE HISTORY_FILE
Prints the whole session; exits non-zero with the session so far when an
expected output does not arrive in time.
"""
import os
import pty
import select
import sys
import time

cli, warehouse, history = sys.argv[1:4]

pid, fd = pty.fork()
if pid == 0:
    os.environ["LAKESTREAM_HISTORY"] = history
    os.execv(cli, [cli, "--warehouse", warehouse, "--option", "local.tier-interval=off"])

out = b""
mark = 0


def expect(needle, timeout=90):
    """Waits for `needle` in what the shell printed since the last send."""
    global out
    deadline = time.time() + timeout
    while time.time() < deadline:
        if needle.encode() in out[mark:]:
            return
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
    sys.stdout.write(out.decode(errors="replace"))
    sys.exit("timed out waiting for %r" % needle)


def send(text):
    global mark
    mark = len(out)
    os.write(fd, text.encode())


expect("lakestream> ")
# A statement over two lines: nothing runs until the ';'.
send("CREATE TABLE t (id INT, v STRING)\r")
time.sleep(0.3)
send("WITH ('lakestream.enabled' = 'true');\r")
expect("OK. Query took")
send("INSERT INTO t VALUES (1, 'a'), (2, 'b');\r")
expect("1 rows in set. Query took")
send("SELECT count(*) AS n FROM t;\r")
expect("| 0 |")
send("\\d\r")
expect("| t ")
send("\\d t\r")
expect("lakestream.enabled")
send("\\pset format csv\r")
expect("Output format is csv.")
send("SELECT * FROM t$rt ORDER BY id;\r")
expect("2,b")
# A failing statement reports and the shell goes on.
send("SELECT * FROM nosuch$rt;\r")
expect("does not exist")
# CREATE CATALOG and SHOW CATALOGS.
send("CREATE CATALOG second WITH ('warehouse' = '%s', 'lakestream.store' = 'local');\r" % warehouse)
expect("OK. Query took")
# Keys typed into a statement never print, nor reach the history file.
send("CREATE CATALOG third WITH ('warehouse' = '%s', 's3.secret-key' = 'NEVER-PRINT-ME-42');\r" % warehouse)
expect("OK. Query took")
send("SHOW CATALOGS;\r")
expect("second,local")
# A streaming read prints rows as they come and runs until Ctrl-C.
# A statement that changes a setting answers OK, as DDL does.
send("SET lakestream.scan_mode = 'streaming';\r")
expect("OK. Query took")
send("SELECT id FROM t$rt;\r")
expect("\r\n2\r\n")
time.sleep(1.0)
send("\x03")
expect("Query cancelled.")
# The shell is still there.
send("SET lakestream.scan_mode = 'batch';\r")
expect("OK. Query took")
send("CALL sys.lakestream_tier('t');\r")
expect("default.t,2,1")
# A command typed after a statement that lacks its ';' runs (psql's way);
# the statement is not part of it, and the next prompt starts with it.
send("\\pset format table\r")
expect("Output format is table.")
send("SELECT 41 AS kept\r")
time.sleep(0.3)
send("\\quiet on\r")
# The next prompt starts with the statement: a ';' finishes it.
time.sleep(0.5)
send(";\r")
expect("| 41   |")
# \q after one quits without running it, and says so.
send("SELECT 42 AS dropped\r")
time.sleep(0.3)
send("\\q\r")
expect("not run, as it lacks its terminating ';': SELECT 42 AS dropped")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else "shell exit status %d" % status)

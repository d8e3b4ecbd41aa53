"""The server's counting rules that the other tests rely on (see the comment in harness.py).
No dbtap here: these check the truth itself, on the live MariaDB, so a server that counts
differently fails here by name instead of making a dbtap test fail for the wrong reason."""

import subprocess

import MySQLdb
import pymysql
import pymysql.constants.CLIENT as CLIENT
import pytest

from binproto import BinaryClient
from harness import PASSWORD, PASSWORD2, USER, USER2, delta

WATCH = ["Questions", "Com_select", "Com_insert", "Com_update", "Com_delete", "Com_stmt_prepare",
         "Com_stmt_execute", "Com_stmt_close", "Com_stmt_reset", "Com_stmt_fetch",
         "Com_stmt_send_long_data", "Com_prepare_sql", "Com_execute_sql", "Com_dealloc_sql",
         "Com_change_db", "Com_admin_commands", "Com_set_option", "Com_show_status",
         "Connections", "Ssl_accepts"]


def measure(server, fn, threads=2):
    """Counter deltas over fn(); `threads`: connections open once fn() is done (status + conn)."""
    b = server.status()
    fn()
    d = delta(b, server.status(threads=threads))
    return {k: d.get(k, 0) for k in WATCH if d.get(k, 0)}


@pytest.fixture(scope="module")
def conn(server):
    with server.root() as r, r.cursor() as cur:
        cur.execute("USE dbtap_test")
        cur.execute("CREATE TABLE IF NOT EXISTS dbtap_test.cnt_t (id INT PRIMARY KEY, v LONGBLOB)")
        cur.execute("DELETE FROM dbtap_test.cnt_t")
        cur.execute("INSERT INTO dbtap_test.cnt_t (id) SELECT seq FROM seq_1_to_50")
    c = server.connect(client_flag=CLIENT.MULTI_STATEMENTS)
    yield c
    c.close()


def q(c, sql):
    with c.cursor() as cur:
        try:
            cur.execute(sql)
            while cur.nextset():
                pass
        except pymysql.err.MySQLError:
            pass


def test_rows_sent(server, conn):
    def run():
        with conn.cursor() as cur:
            cur.execute("SELECT seq FROM seq_1_to_100")
            assert len(cur.fetchall()) == 100
            cur.execute("SELECT 1; SELECT seq FROM seq_1_to_3")
            while cur.nextset():
                pass
    b = server.status()
    run()
    assert delta(b, server.status())["Rows_sent"] == 104


def test_rows_sent_excludes_cursor_fetch(server, conn):
    bc = BinaryClient(conn)
    st = bc.prepare("SELECT seq FROM seq_1_to_100 WHERE seq <= ?")
    b = server.status()
    bc.execute(st, [10])
    assert delta(b, server.status())["Rows_sent"] == 10
    b = server.status()
    assert bc.execute(st, [40], cursor=True)["cursor"]
    assert bc.fetch(st, 100) == (40, True)
    assert delta(b, server.status())["Rows_sent"] == 0
    bc.close(st)
    conn.ping(reconnect=False)  # COM_STMT_CLOSE has no reply: be sure it is handled here


def test_text_query_counts_once(server, conn):
    assert measure(server, lambda: q(conn, "SELECT 1")) == {"Questions": 1, "Com_select": 1}


def test_parse_error_counts_no_com(server, conn):
    assert measure(server, lambda: q(conn, "SELEC 1")) == {"Questions": 1}


def test_unknown_table_and_duplicate_count_their_kind(server, conn):
    assert measure(server, lambda: q(conn, "SELECT * FROM no_such_t")) == {"Questions": 1, "Com_select": 1}
    assert measure(server, lambda: q(conn, "INSERT INTO cnt_t (id) VALUES (1)")) == {"Questions": 1, "Com_insert": 1}


def test_multi_statement_counts_each_statement(server, conn):
    got = measure(server, lambda: q(conn, "SELECT 1; SELECT 2; UPDATE cnt_t SET id = id WHERE id = 1; "
                                          "DELETE FROM cnt_t WHERE id = 0"))
    assert got == {"Questions": 4, "Com_select": 2, "Com_update": 1, "Com_delete": 1}
    got = measure(server, lambda: q(conn, "SELECT 1; SELEC 2; SELECT 3"))
    assert got == {"Questions": 2, "Com_select": 1}


def test_binary_protocol(server, conn):
    bc = BinaryClient(conn)
    st = {}
    assert measure(server, lambda: st.update(s=bc.prepare("SELECT id FROM cnt_t WHERE id < ?"))) == {"Com_stmt_prepare": 1}
    assert measure(server, lambda: bc.execute(st["s"], [10])) == {"Questions": 1, "Com_stmt_execute": 1, "Com_select": 1}
    assert measure(server, lambda: bc.execute(st["s"], [40], cursor=True)) == {"Questions": 1, "Com_stmt_execute": 1, "Com_select": 1}
    assert measure(server, lambda: bc.fetch(st["s"], 100)) == {"Questions": 1, "Com_stmt_fetch": 1}
    assert measure(server, lambda: bc.reset(st["s"])) == {"Com_stmt_reset": 1}
    # COM_STMT_CLOSE has no reply: a PING behind it makes sure the server has handled it.
    assert measure(server, lambda: (bc.close(st["s"]), conn.ping(reconnect=False))) == \
        {"Com_stmt_close": 1, "Com_admin_commands": 1}

    def longdata():
        s = bc.prepare("UPDATE cnt_t SET v = ? WHERE id = ?")
        bc.send_long_data(s, 0, b"x" * 1000)
        bc.send_long_data(s, 0, b"y" * 1000)
        bc.execute(s, [None, 3])
        bc.close(s)
    assert measure(server, longdata) == {"Questions": 3, "Com_stmt_prepare": 1, "Com_stmt_send_long_data": 2,
                                         "Com_stmt_execute": 1, "Com_update": 1, "Com_stmt_close": 1}

    def bad():
        with pytest.raises(pymysql.err.ProgrammingError):
            bc.prepare("SELEC ?")
    assert measure(server, bad) == {"Com_stmt_prepare": 1}


def test_sql_prepare_execute(server, conn):
    got = measure(server, lambda: q(conn, "PREPARE s FROM 'SELECT id FROM cnt_t WHERE id < ?'; "
                                          "SET @a = 5; EXECUTE s USING @a; DEALLOCATE PREPARE s"))
    assert got == {"Questions": 4, "Com_prepare_sql": 1, "Com_stmt_prepare": 1, "Com_set_option": 1,
                   "Com_execute_sql": 1, "Com_stmt_execute": 1, "Com_select": 1,
                   "Com_dealloc_sql": 1, "Com_stmt_close": 1}


def test_admin_commands(server, conn):
    assert measure(server, lambda: conn.ping(reconnect=False)) == {"Com_admin_commands": 1}
    assert measure(server, lambda: conn.select_db("dbtap_other")) == {"Questions": 1, "Com_change_db": 1}
    conn.select_db("dbtap_test")
    m = MySQLdb.connect(host="127.0.0.1", port=server.port, user=USER, password=PASSWORD,
                        database="dbtap_test", autocommit=True)
    try:
        assert measure(server, lambda: m.change_user(USER2, PASSWORD2, "dbtap_other"), threads=3) == {"Questions": 1, "Com_admin_commands": 1}
        assert measure(server, lambda: m.stat(), threads=3) == {"Com_show_status": 1}
    finally:
        m.close()


def test_client_connects(server, conn):
    assert measure(server, lambda: server.connect().close()) == {"Questions": 1, "Connections": 1}
    got = measure(server, lambda: MySQLdb.connect(host="127.0.0.1", port=server.port, user=USER,
                                                  password=PASSWORD, autocommit=True).close())
    assert got == {"Questions": 1, "Connections": 1}
    got = measure(server, lambda: MySQLdb.connect(host="127.0.0.1", port=server.port, user=USER,
                                                  password=PASSWORD).close())
    assert got == {"Questions": 2, "Connections": 1, "Com_set_option": 1}
    got = measure(server, lambda: server.connect(ssl={"ca": str(server.ssldir / "cert.pem")}).close())
    assert got == {"Questions": 1, "Connections": 1, "Ssl_accepts": 1}


def test_mariadb_cli_uses_tls_by_default(server):
    def run(*extra):
        r = subprocess.run(["mariadb", "-h127.0.0.1", f"-P{server.port}", f"-u{USER}", f"-p{PASSWORD}",
                            *extra, "-N", "-e", "SHOW SESSION STATUS LIKE 'Ssl_cipher'"],
                           capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
        return r.stdout.split("\t")[1].strip()
    assert run() != ""
    assert run("--skip-ssl") == ""


def test_sysbench_counts_agree_with_server(sysbench_capture):
    """The sysbench capture's truth: its own counts vs the server's, before dbtap is involved."""
    cap = sysbench_capture["lo"]
    sb, d = cap.extra["sysbench"], cap.counters
    threads = 4
    assert d["Com_stmt_execute"] == sb["total"] + sb["ignored_errors"]
    assert d["Com_select"] == sb["read"]
    # Only writes fail (deadlocks); a failed statement is missing from sysbench's counts.
    assert d["Com_insert"] + d["Com_update"] + d["Com_delete"] == sb["write"] + sb["ignored_errors"]
    assert d["Com_begin"] + d["Com_commit"] == sb["other"]
    assert d["Com_commit"] == sb["transactions"]
    assert d["Com_stmt_prepare"] == d["Com_stmt_close"] == 11 * threads
    assert d["Connections"] == threads
    assert d["Questions"] == d["Com_stmt_execute"] + threads  # + one COM_QUIT per thread
    assert d["Ssl_accepts"] == 0
    assert d["Rows_sent"] > d["Com_select"]  # the range selects return many rows each


def test_scripted_ledger_agrees_with_server(scripted_capture):
    """The scripted workload's ledger vs the server's counters, before dbtap is involved."""
    L = scripted_capture.extra["ledger"]
    d = scripted_capture.counters
    n = L.visible_counts()
    tls = L.by_name("tls").counts()
    assert d["Com_stmt_prepare"] == n["prepare"] + L.sql_prepare
    assert d["Com_stmt_execute"] == n["execute"] + L.sql_execute
    assert d["Com_stmt_close"] == n["close"] + L.sql_dealloc
    assert d["Com_stmt_reset"] == n["reset"]
    assert d["Com_stmt_fetch"] == n["fetch"]
    assert d["Com_stmt_send_long_data"] == n["send_long_data"]
    assert d["Com_change_db"] == n["init_db"]
    assert d["Com_admin_commands"] == n["ping"] + n["change_user"]
    assert d["Ssl_accepts"] == 1
    # Connections opened during the capture: every ledger connection but the pre-existing one.
    assert d["Connections"] == len(L.conns) - 1
    # The logins refused with a wrong password.
    assert d["Access_denied_errors"] == n["connect"] == 3
    # Questions: every request but PING/PREPARE/CLOSE/RESET and failed logins, plus the extra
    # statements of the multi-statement queries (3 x 3 more, 1 more for each of the two that fail
    # on their 2nd, and 1 more for the two-statement one that warns).
    all_counts = n + tls
    extra = sum(len(r.statements) - 1 for r in L.by_name("multi").reqs if r.statements)
    assert extra == 3 * 3 + 1 + 1 + 1
    expected = sum(all_counts.values()) - all_counts["ping"] - all_counts["prepare"] \
        - all_counts["close"] - all_counts["reset"] - all_counts["connect"] + extra
    assert d["Questions"] == expected
    # Rows sent to clients: the ledger's rows, TLS connection included, cursor fetches excluded.
    rows = sum(r.rows for c in L.conns.values() for r in c.reqs if r.command != "fetch")
    assert d["Rows_sent"] == rows

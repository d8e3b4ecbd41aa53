#!/usr/bin/python3
"""Workloads that produced the real PostgreSQL transcripts in this directory.

Setup (PostgreSQL 15, a private server on 127.0.0.1:PORT, see README in this file's header):
  initdb -U postgres --auth=trust; pg_hba: `host all app 127.0.0.1/32 scram-sha-256` first;
  shared_preload_libraries=pg_stat_statements; role app/secret; databases shop (table items
  seeded with 5 rows) and bench (`pgbench -i -s 1`), pg_stat_statements in both.

Run while `tcpdump -i lo -w cap.pcap -s 0 port PORT` records, then
`pcap2transcripts.py cap.pcap PORT . expect.json`.

Every connection sets a distinct application_name; expect.json maps it to what the client saw
(rows, affected rows, SQLSTATE of errors) -- the truth the Rust tests compare the session's
events with. For pgbench, the pg_stat_statements counters of the run (calls, rows per
statement) are recorded too. Clients: psql (simple protocol, COPY, multi-statement -c),
psycopg2 (simple protocol, client-side parameters, a cancel), psycopg 3 (extended protocol,
prepared statements after 5 executions, pipeline mode, COPY), pgbench -M simple / extended /
prepared. libpq's default sslmode=prefer makes every connection send an SSLRequest first, which
this server (no SSL) refuses with 'N'.
"""
import json
import os
import subprocess
import sys
import threading
import time

import psycopg
import psycopg2
import psycopg2.extensions

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 25432
OUT = sys.argv[2] if len(sys.argv) > 2 else "expect.json"
HOST, USER, PW, DB = "127.0.0.1", "app", "secret", "shop"
BIN = "/usr/lib/postgresql/15/bin"
EXPECT = {}


def rec(lst, command, sql="", rows=0, affected=0, err="0"):
    lst.append(f"{command} rows={rows} affected={affected} err={err} sql={sql}")


def env(app):
    e = dict(os.environ)
    e.update(PGHOST=HOST, PGPORT=str(PORT), PGUSER=USER, PGPASSWORD=PW, PGAPPNAME=app)
    return e


def psql(app, db, *args, stdin=None):
    r = subprocess.run([f"{BIN}/psql", "-X", "-d", db, *args], env=env(app), input=stdin,
                       capture_output=True, text=True)
    return r.stdout + r.stderr


def psql_file():
    ex = []
    script = """SELECT id, name FROM items ORDER BY id;
SELECT count(*) FROM items;
UPDATE items SET price = price + 1 WHERE id <= 2;
SELECT * FROM nope;
\\copy items (name, price) from stdin
melon\t5.5
lime\t0.4
date\t\\N
\\.
COPY items TO STDOUT;
DELETE FROM items WHERE id > 5;
SELECT g FROM generate_series(1, 3000) g;
SELECT 1 AS a, NULL AS b;
"""
    out = psql("psql_file", DB, "-f", "-", stdin=script)
    assert "(3000 rows)" in out and "ERROR:  relation \"nope\" does not exist" in out, out
    rec(ex, "query", "SELECT id, name FROM items ORDER BY id", rows=5)
    rec(ex, "query", "SELECT count(*) FROM items", rows=1)
    rec(ex, "query", "UPDATE items SET price = price + 1 WHERE id <= 2", affected=2)
    rec(ex, "query", "SELECT * FROM nope", err="42P01")
    rec(ex, "query", "COPY  items ( name, price ) FROM STDIN", affected=3)
    rec(ex, "query", "COPY items TO STDOUT", rows=8)
    rec(ex, "query", "DELETE FROM items WHERE id > 5", affected=3)
    rec(ex, "query", "SELECT g FROM generate_series(1, 3000) g", rows=3000)
    rec(ex, "query", "SELECT 1 AS a, NULL AS b", rows=1)
    rec(ex, "terminate")
    EXPECT["psql_file"] = {"name": "psql_file", "expect": ex}


def psql_multi():
    ex = []
    out = psql("psql_multi", DB, "-c", "SELECT 1; SELECT * FROM nope; SELECT 2",
               "-c", "BEGIN; UPDATE items SET price = price WHERE id = 1; "
                     "SELECT name FROM items WHERE id IN (1, 2); COMMIT")
    assert "relation \"nope\" does not exist" in out, out
    # psql sends each -c string as one Query; the server answers statement by statement and
    # an error aborts the rest of the string.
    rec(ex, "query", "SELECT 1", rows=1)
    rec(ex, "query", "SELECT * FROM nope", err="42P01")
    rec(ex, "query", "BEGIN")
    rec(ex, "query", "UPDATE items SET price = price WHERE id = 1", affected=1)
    rec(ex, "query", "SELECT name FROM items WHERE id IN (1, 2)", rows=2)
    rec(ex, "query", "COMMIT")
    rec(ex, "terminate")
    EXPECT["psql_multi"] = {"name": "psql_multi", "expect": ex}


def psycopg2_simple():
    conn = psycopg2.connect(host=HOST, port=PORT, user=USER, password=PW, dbname=DB,
                            application_name="psycopg2")
    ex = []
    cur = conn.cursor()

    def q(sql, args=None):
        try:
            cur.execute(sql, args)
            sent = cur.query.decode()
            if cur.description is not None:
                rec(ex, "query", sent, rows=len(cur.fetchall()))
            else:
                rec(ex, "query", sent, affected=max(cur.rowcount, 0))
        except psycopg2.Error as e:
            rec(ex, "query", cur.query.decode(), err=e.pgcode)
            conn.rollback()

    q("SELECT id, name, price FROM items WHERE id = %s", (3,))
    q("SELECT id, name FROM items WHERE name IN %s ORDER BY id", (("apple", "fig", "nope"),))
    q("INSERT INTO items (name, price) VALUES (%s, %s), (%s, %s)", ("quince", 4.5, "it's", None))
    q("UPDATE items SET price = price * 2 WHERE name = %s", ("quince",))
    conn.commit()
    q("SELECT * FROM items WHERE id = %s AND name = %s", (1, "x'); DROP TABLE items; --"))
    q("SELEC 1")
    q("DELETE FROM items WHERE id > 5")
    conn.commit()
    # A cancel: its own connection carries a CancelRequest with this backend's pid.
    conn.autocommit = True
    timer = threading.Timer(0.3, conn.cancel)
    timer.start()
    q("SELECT pg_sleep(3)")
    timer.join()
    q("SELECT %s::text AS greeting, %s AS n", ("hello; world", 42))
    pid = conn.get_backend_pid()
    conn.close()
    rec(ex, "terminate")
    EXPECT["psycopg2"] = {"name": "psycopg2_simple", "expect": ex, "pid": pid}


def dollars(sql):
    """psycopg 3 sends %s placeholders as $1, $2..."""
    out, n = [], 0
    for part in sql.split("%s"):
        out.append(part)
        n += 1
        out.append(f"${n}")
    return "".join(out[:-1])


def psycopg3_extended():
    conn = psycopg.connect(host=HOST, port=PORT, user=USER, password=PW, dbname=DB,
                           application_name="psycopg3", autocommit=True)
    ex = []
    cur = conn.cursor()

    def q(sql, args=None, err_at="prepare"):
        try:
            cur.execute(sql, args)
            if cur.description is not None:
                rec(ex, "execute", dollars(sql), rows=len(cur.fetchall()))
            else:
                rec(ex, "execute", dollars(sql), affected=max(cur.rowcount, 0))
        except psycopg.Error as e:
            # Parse fails for syntax and unknown-relation errors: the error is the prepare's.
            rec(ex, err_at, dollars(sql), err=e.sqlstate)

    # The same statement 8 times: psycopg prepares it (a named statement) after 5.
    for i in range(1, 9):
        q("SELECT id, name, price FROM items WHERE id = %s", (i % 5 + 1,))
    q("UPDATE items SET price = %s WHERE id = %s", (9.99, 2))
    q("SELECT * FROM nope WHERE id = %s", (1,))
    q("SELECT 1 / %s::int AS x", (0,), err_at="execute")
    # Pipeline mode: several statements, and several Syncs, in flight.
    with conn.pipeline() as p:
        c1 = conn.cursor()
        c1.execute("SELECT name FROM items WHERE id = %s", (1,))
        c2 = conn.cursor()
        c2.execute("SELECT name FROM items WHERE id = %s", (2,))
        p.sync()
        c3 = conn.cursor()
        c3.execute("UPDATE items SET price = price WHERE id <= %s", (3,))
        p.sync()
        c4 = conn.cursor()
        c4.execute("SELECT count(*) FROM items WHERE price > %s", (1,))
    for c, sql, kind in [(c1, "SELECT name FROM items WHERE id = %s", "rows"),
                         (c2, "SELECT name FROM items WHERE id = %s", "rows"),
                         (c3, "UPDATE items SET price = price WHERE id <= %s", "affected"),
                         (c4, "SELECT count(*) FROM items WHERE price > %s", "rows")]:
        if kind == "rows":
            rec(ex, "execute", dollars(sql), rows=len(c.fetchall()))
        else:
            rec(ex, "execute", dollars(sql), affected=c.rowcount)
    # An error inside a pipeline: the server skips the rest up to the Sync.
    try:
        with conn.pipeline():
            conn.execute("SELECT id FROM items WHERE id = %s", (1,))
            conn.execute("SELECT nope FROM items WHERE id = %s", (1,))
            conn.execute("SELECT id FROM items WHERE id = %s", (2,))
    except psycopg.Error as e:
        rec(ex, "execute", dollars("SELECT id FROM items WHERE id = %s"), rows=1)
        rec(ex, "prepare", dollars("SELECT nope FROM items WHERE id = %s"), err=e.sqlstate)
    # executemany: pipelined Bind/Execute.
    cur.executemany("INSERT INTO items (name, price) VALUES (%s, %s)",
                    [("a1", 1), ("a2", 2), ("a3", 3)])
    for _ in range(3):
        rec(ex, "execute", dollars("INSERT INTO items (name, price) VALUES (%s, %s)"),
            affected=1)
    # COPY both ways.
    with cur.copy("COPY items (name, price) FROM STDIN") as copy:
        for row in [("b1", 1.5), ("b2", None)]:
            copy.write_row(row)
    rec(ex, "query", "COPY items (name, price) FROM STDIN", affected=cur.rowcount)
    n = 0
    with cur.copy("COPY (SELECT id, name FROM items ORDER BY id) TO STDOUT") as copy:
        for _ in copy.rows():
            n += 1
    rec(ex, "query", "COPY (SELECT id, name FROM items ORDER BY id) TO STDOUT", rows=n)
    q("DELETE FROM items WHERE id > %s", (5,))
    pid = conn.info.backend_pid
    conn.close()
    rec(ex, "terminate")
    EXPECT["psycopg3"] = {"name": "psycopg3_extended", "expect": ex, "pid": pid}


def admin(db, sql, args=None):
    """A statement on a connection of its own, outside any transaction block."""
    c = psycopg.connect(host=HOST, port=PORT, user="postgres", dbname=db,
                        application_name="pgss", autocommit=True)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def pgss(db):
    rows = admin(db, "SELECT calls, rows, query FROM pg_stat_statements "
                     "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s) "
                     "AND query NOT LIKE %s ORDER BY query", (db, "%pg_stat_statements%"))
    return [f"calls={c} rows={r} query={q}" for c, r, q in rows]


def pgss_reset(db):
    admin(db, "SELECT pg_stat_statements_reset()")


def pgbench(mode):
    app = f"pgbench_{mode}"
    pgss_reset("bench")
    time.sleep(0.2)
    r = subprocess.run([f"{BIN}/pgbench", "-n", "-c", "1", "-t", "5", "-M", mode, "bench"],
                       env=env(app), capture_output=True, text=True)
    assert "number of transactions actually processed: 5/5" in r.stdout, r.stdout + r.stderr
    time.sleep(0.2)
    EXPECT[app] = {"name": app, "expect": [], "pgss": pgss("bench")}


if __name__ == "__main__":
    psql_file()
    psql_multi()
    psycopg2_simple()
    psycopg3_extended()
    for m in ("simple", "extended", "prepared"):
        pgbench(m)
    with open(OUT, "w") as f:
        json.dump(EXPECT, f, indent=1)
    print("wrote", OUT)

#!/usr/bin/env bash
# Regenerates golden.tsv: the pt-query-digest 3.2.1 fingerprint and query ID of every query in
# corpus.txt plus generated variants, computed by pt-query-digest's own code.
#
#   crates/fingerprint/tests/data/regen.sh
#
# Needs percona-toolkit 3.2.1 (`apt-get install percona-toolkit` on Debian 12) and perl.
# pt-query-digest and pt-fingerprint are Perl modulinos: `require` loads their packages without
# running main(), so each query reaches QueryRewriter::fingerprint intact (pt-fingerprint's own
# file mode splits input on ";\n" and drops lines starting with '#', so it can't take any query).
# Checks done here, and failing the script if wrong:
#   * `pt-fingerprint --query` agrees with the loaded pt-fingerprint code on a sample;
#   * pt-query-digest run end to end on a slow log made from a sample of single-line queries
#     reports, per class, exactly the fingerprint and checksum (ID) written to golden.tsv.
#
# golden.tsv columns (tab-separated, `\n` `\t` `\r` `\\` escaped; first line is a header):
#   query, pt-query-digest fingerprint, query ID (make_checksum), pt-fingerprint tool fingerprint.
# pt-query-digest's fingerprint also turns true/false into `?`; pt-fingerprint 3.2.1 does not,
# so the last column differs on those rows. dbtap's fingerprint_pt follows pt-query-digest.
set -euo pipefail
cd "$(dirname "$0")"
PQD=${PT_QUERY_DIGEST:-/usr/bin/pt-query-digest}
PTF=${PT_FINGERPRINT:-/usr/bin/pt-fingerprint}
for tool in "$PQD" "$PTF"; do
  "$tool" --version | grep -q ' 3\.2\.1$' || { echo "need percona-toolkit 3.2.1: $tool" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Shared escaping helpers (perl).
cat > "$tmp/esc.pl" <<'EOF'
sub unesc { my $s = shift; $s =~ s/\\(n|t|r|\\)/$1 eq 'n' ? "\n" : $1 eq 't' ? "\t" : $1 eq 'r' ? "\r" : "\\"/ge; $s }
sub esc { my $s = shift; $s =~ s/\\/\\\\/g; $s =~ s/\n/\\n/g; $s =~ s/\t/\\t/g; $s =~ s/\r/\\r/g; $s }
1;
EOF

# 1. The query list: corpus.txt, then generated variants, deduplicated, one escaped per line.
perl -e '
  use strict; use warnings; binmode STDOUT; require $ARGV[0];
  my (@q, %seen);
  sub add { my $q = shift; push @q, $q unless $seen{$q}++ }
  open my $fh, "<:raw", "corpus.txt" or die $!;
  while (my $l = <$fh>) { chomp $l; next if $l eq "" || $l =~ /^# /; add(unesc($l)) }
  # Literal values of every kind, in a few positions.
  my @nums = ("0", "1", "-1", "+1", "42", "-42", "3.14", "-3.14", ".5", "-.5", "5.", "1e3", "1E3",
              "-1e-3", "2.5E+10", "6e-30", "0x1a", "0x1A", "0b11", "18446744073709551615", "00012");
  my @strs = (q{'"'"'a'"'"'}, q{'"'"''"'"'}, q{'"'"'it'"'"''"'"'s'"'"'}, q{'"'"'a\'"'"'b'"'"'},
              q{'"'"'back\\\\slash'"'"'}, q{"dq"}, q{"d""q"}, q{'"'"'a"b'"'"'}, q{"c'"'"'d"},
              q{'"'"'é'"'"'}, qq{'"'"'tab\there'"'"'}, qq{'"'"'nl\nhere'"'"'}, q{x'"'"'0F'"'"'},
              q{X'"'"'0F'"'"'}, q{b'"'"'1'"'"'}, q{N'"'"'n'"'"'}, q{_utf8mb4'"'"'u'"'"'},
              q{'"'"'2024-01-01 00:00:00'"'"'}, q{'"'"'--'"'"'}, q{'"'"'/*x*/'"'"'});
  my @lits = (@nums, @strs, "NULL", "null", "TRUE", "false", "?");
  for my $v (@lits) {
    add("SELECT * FROM t WHERE a = $v");
    add("SELECT c FROM t WHERE a=$v AND b<>$v");
    add("UPDATE t SET a = $v WHERE id = 1");
    add("SELECT $v");
  }
  for my $v (@nums) {
    add("UPDATE t SET a = a + $v WHERE id = 1");
    add("SELECT a-$v FROM t");
    add("SELECT * FROM t WHERE a BETWEEN $v AND $v");
  }
  # IN lists and multi-row VALUES of several lengths and spacings.
  for my $n (1, 2, 3, 10) {
    my @v = map { $_ * 7 } 1 .. $n;
    add("SELECT * FROM t WHERE id IN (" . join(",", @v) . ")");
    add("SELECT * FROM t WHERE id IN ( " . join(" , ", map { "\x27s$_\x27" } @v) . " )");
    add("INSERT INTO t (a, b) VALUES " . join(", ", map { "($_, \x27v$_\x27)" } @v));
    add("INSERT INTO t (a, b) VALUES " . join(",", map { "($_,NOW())" } @v));
    add("INSERT INTO t (a, b) VALUES " . join(",\n", map { "($_, $_)" } @v) . " ON DUPLICATE KEY UPDATE b = VALUES(b) + 1");
    add("REPLACE INTO t VALUES " . join(" , ", map { "(-$_)" } @v));
  }
  # LIMIT, ORDER BY, UNION shapes.
  for my $l ("LIMIT 1", "LIMIT 1,2", "LIMIT 1, 2", "LIMIT 1 OFFSET 2", "limit 10 offset 0") {
    for my $o ("", "ORDER BY a ", "ORDER BY a ASC ", "ORDER BY a DESC, b ASC ") {
      add("SELECT a FROM t WHERE b = 1 $o$l");
    }
  }
  for my $u ("UNION", "UNION ALL", "union") {
    add("SELECT a FROM t WHERE b = 1 $u SELECT a FROM t WHERE b = 2");
    add("SELECT a FROM t WHERE b = 1 $u SELECT a FROM t WHERE b = 2 $u SELECT a FROM t WHERE b = 3");
    add("SELECT a FROM t1 $u SELECT a FROM t2");
  }
  # Identifiers with digits.
  for my $id ("sbtest1", "sbtest22", "t1", "db1.t2", "`t1`", "tbl_2021_12", "a1b2", "x1", "b1", "tab1e",
              "log_20240101", "h4sh_deadbeef", "c0ffee", "T9Z", "n1.c2", "v2.x3y") {
    add("SELECT * FROM $id WHERE id = 1");
  }
  # Comments in several places.
  for my $c ("/* c */", "/*c*/", "-- c\n", "# c\n", "/*!50000 c */", "/*+ hint */") {
    add("SELECT $c a FROM t WHERE b = 1");
    add("${c}SELECT a FROM t WHERE b = 1");
    add("SELECT a FROM t WHERE b = 1 $c");
  }
  print esc($_), "\n" for @q;
' "$tmp/esc.pl" > "$tmp/queries"

# 2. pt-query-digest: fingerprint and make_checksum (its own functions).
perl -e '
  use strict; use warnings; binmode STDIN; binmode STDOUT;
  require $ARGV[0]; require $ARGV[1];
  my $qr = QueryRewriter->new();
  while (my $l = <STDIN>) {
    chomp $l;
    my $fp = $qr->fingerprint(unesc($l));
    print esc($fp), "\t", Transformers::make_checksum($fp), "\n";
  }
' "$tmp/esc.pl" "$PQD" < "$tmp/queries" > "$tmp/qd"

# 3. pt-fingerprint's QueryRewriter.
perl -e '
  use strict; use warnings; binmode STDIN; binmode STDOUT;
  require $ARGV[0]; require $ARGV[1];
  my $qr = QueryRewriter->new();
  while (my $l = <STDIN>) { chomp $l; print esc($qr->fingerprint(unesc($l))), "\n" }
' "$tmp/esc.pl" "$PTF" < "$tmp/queries" > "$tmp/tool"

# 4. The loaded pt-fingerprint code agrees with the command line on a sample of simple queries.
paste "$tmp/queries" "$tmp/tool" | grep -v '\\' | awk -F'\t' 'NR % 9 == 1' | head -40 > "$tmp/sample_cli"
[ -s "$tmp/sample_cli" ]
while IFS=$'\t' read -r q fp; do
  got=$("$PTF" --query "$q" < /dev/null) || true  # exits 1 after printing
  [ "$got" = "$fp" ] || { echo "pt-fingerprint --query disagrees on: $q ($got vs $fp)" >&2; exit 1; }
done < "$tmp/sample_cli"

# 5. End to end: a slow log of single-line sample queries through pt-query-digest; every class it
#    reports must carry the fingerprint and ID golden.tsv has for its example query.
paste "$tmp/queries" "$tmp/qd" \
  | awk -F'\t' '$1 ~ /^[A-Za-z(]/ && $1 !~ /[;#\\]|[[:space:]]$|^(use|USE|administrator) / && NR % 5 == 0' \
  > "$tmp/e2e"
[ "$(wc -l < "$tmp/e2e")" -ge 20 ]
perl -e '
  use strict; use warnings; binmode STDIN; binmode STDOUT; my $t = 1704067200;
  while (my $l = <STDIN>) {
    my ($q) = split /\t/, $l; $t++;
    print "# Time: 240101  0:00:00\n# User\@Host: u[u] \@ localhost []  Id: 1\n",
          "# Query_time: 0.001000  Lock_time: 0.000000 Rows_sent: 1  Rows_examined: 1\n",
          "SET timestamp=$t;\n$q;\n";
  }
' < "$tmp/e2e" > "$tmp/slow.log"
"$PQD" --no-version-check --limit 100000 --output json "$tmp/slow.log" > "$tmp/report.json"
perl -e '
  use strict; use warnings; require $ARGV[0]; binmode STDOUT;
  use JSON::PP;
  my %want; open my $e, "<:raw", $ARGV[1] or die $!;
  while (my $l = <$e>) { chomp $l; my ($q, $fp, $id) = split /\t/, $l; $want{unesc($q)} = [unesc($fp), $id] }
  open my $j, "<:raw", $ARGV[2] or die $!; local $/; my $r = JSON::PP->new->utf8->decode(<$j>);
  # pt encodes its byte strings as Latin-1 into the JSON: decoding gives back the bytes.
  my ($n, %ids) = (0);
  for my $c (@{ $r->{classes} }) {
    my $w = $want{ $c->{example}{query} } or die "no golden row for example: $c->{example}{query}\n";
    $c->{fingerprint} eq $w->[0] or die "fingerprint differs: $c->{fingerprint} vs $w->[0]\n";
    $c->{checksum} eq $w->[1] or die "ID differs: $c->{checksum} vs $w->[1]\n";
    $ids{ $c->{checksum} } = 1; $n++;
  }
  for my $q (keys %want) { $ids{ $want{$q}[1] } or die "no class reported with ID $want{$q}[1]\n" }
  print STDERR "end to end: $n pt-query-digest classes match golden fingerprints and IDs\n";
' "$tmp/esc.pl" "$tmp/e2e" "$tmp/report.json"

# 6. golden.tsv
{
  printf 'query\tfingerprint\tquery_id\tpt_fingerprint_tool\n'
  paste "$tmp/queries" "$tmp/qd" "$tmp/tool"
} > golden.tsv
echo "golden.tsv: $(($(wc -l < golden.tsv) - 1)) rows" >&2

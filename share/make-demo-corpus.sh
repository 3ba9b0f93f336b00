#!/bin/sh
# make-demo-corpus.sh: writes a CodeParrot-style JSON-lines corpus built from the Python standard library
# sources installed on this machine (no download): one object per file with the keys repo_name, path,
# copies, size, content, license, in sorted path order, so that the corpus is the same on every run.
# Usage: make-demo-corpus.sh [SRC_DIR] > corpus.jsonl     (SRC_DIR defaults to Debian's python3 library)
set -eu
src=${1:-}
if [ -z "$src" ]; then
    for d in /usr/lib/python3.11 /usr/lib/python3.12 /usr/lib/python3.13 /usr/lib/python3; do
        [ -d "$d" ] && { src=$d; break; }
    done
fi
[ -n "$src" ] && [ -d "$src" ] || { echo "make-demo-corpus.sh: no Python library sources found (install python3)" >&2; exit 1; }
find "$src" -name '*.py' -type f | LC_ALL=C sort | perl -e '
    use strict; use warnings;
    binmode STDOUT;
    my $src = shift;
    sub jstr { my $s = shift; $s =~ s/(["\\])/\\$1/g; $s =~ s/\n/\\n/g; $s =~ s/\t/\\t/g; $s =~ s/\r/\\r/g;
            $s =~ s/([\x00-\x1f])/sprintf("\\u%04x", ord($1))/ge; return "\"$s\""; }
    while (my $f = <STDIN>) {
        chomp $f;
        open(my $fh, "<:raw", $f) or next;
        local $/; my $c = <$fh>; close $fh;
        next unless defined $c && length $c;
        my $bytes = length $c;
        my $check = $c; next unless utf8::decode($check);   # skip files that are not UTF-8
        (my $rel = $f) =~ s{^\Q$src\E/?}{};
        print "{\"repo_name\": ", jstr("python/cpython"), ", \"path\": ", jstr("Lib/$rel"), ", \"copies\": \"1\", ",
              "\"size\": \"$bytes\", \"content\": ", jstr($c), ", \"license\": \"psf-2.0\"}\n";
    }' "$src"

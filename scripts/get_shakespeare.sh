#!/bin/sh
# Downloads tiny Shakespeare (about 1.1 MB: the works of Shakespeare, public domain, as collected in
# karpathy/char-rnn) for training on a larger text than the built-in one:
#     sh scripts/get_shakespeare.sh                 # writes data/tinyshakespeare.txt
#     sh scripts/get_shakespeare.sh some/file.txt   # or there
#     ./titans train --data data/tinyshakespeare.txt --steps 2000
# Needs curl or wget and a connection to raw.githubusercontent.com.
set -eu
url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
out=${1:-data/tinyshakespeare.txt}
expected=1115394 # bytes of the file this URL has served since 2015

if [ -s "$out" ]; then
  echo "$out already exists; delete it to download again"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp="$out.part"
trap 'rm -f "$tmp"' EXIT
if command -v curl >/dev/null 2>&1; then
  curl -fL --retry 3 -o "$tmp" "$url"
elif command -v wget >/dev/null 2>&1; then
  wget -q -O "$tmp" "$url"
else
  echo "get_shakespeare.sh: need curl or wget" >&2
  exit 1
fi
size=$(wc -c < "$tmp" | tr -d ' ')
if [ "$size" != "$expected" ]; then
  echo "get_shakespeare.sh: got $size bytes, expected $expected; keeping it anyway as $out" >&2
fi
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out ($size bytes)"

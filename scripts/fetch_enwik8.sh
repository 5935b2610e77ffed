#!/usr/bin/env bash
# Downloads enwik8 (10^8 bytes of Wikipedia XML) for `sparsebench train --data`, and checks its SHA-1.
# usage: scripts/fetch_enwik8.sh [DEST]   (DEST defaults to data/enwik8)
set -euo pipefail

url="http://mattmahoney.net/dc/enwik8.zip"
want_sha1="57b8363b814821dc9d47aa4d41f58733519076b2"
dest="${1:-data/enwik8}"

fail() {
  echo "fetch_enwik8: $*" >&2
  exit 1
}

manual_help="download $url on a machine with network access, unzip it, copy the 'enwik8' file (100,000,000 bytes, sha1 $want_sha1) here by hand and pass it as: sparsebench train --data PATH/enwik8"

if [[ -f "$dest" ]] && [[ "$(sha1sum "$dest" | cut -d' ' -f1)" == "$want_sha1" ]]; then
  echo "fetch_enwik8: $dest already present and verified"
  exit 0
fi

command -v unzip > /dev/null || fail "unzip is not installed; install it, or $manual_help"
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch_enwik8: downloading $url"
if command -v curl > /dev/null; then
  curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp/enwik8.zip" "$url" || fail "download failed (no network?); $manual_help"
elif command -v wget > /dev/null; then
  wget -q -T 20 -O "$tmp/enwik8.zip" "$url" || fail "download failed (no network?); $manual_help"
else
  fail "neither curl nor wget is installed; $manual_help"
fi

unzip -q -o "$tmp/enwik8.zip" -d "$tmp" || fail "cannot unzip $tmp/enwik8.zip (damaged download?); $manual_help"
[[ -f "$tmp/enwik8" ]] || fail "the archive holds no 'enwik8' file; $manual_help"
got="$(sha1sum "$tmp/enwik8" | cut -d' ' -f1)"
[[ "$got" == "$want_sha1" ]] || fail "sha1 of the download is $got, expected $want_sha1; $manual_help"
mv "$tmp/enwik8" "$dest"
echo "fetch_enwik8: wrote $dest (sha1 verified); train with: sparsebench train --data $dest"

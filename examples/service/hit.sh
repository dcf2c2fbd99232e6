#!/bin/sh
# One decision from the freqguard decision service (freqguard serve CONFIG), with curl.
#   FREQGUARD_SERVICE=http://127.0.0.1:8080 FREQGUARD_TOKEN=... ./hit.sh sms +4917612345678 hello
# Prints the decision's JSON; exits 0 if the message may go, 1 if a rule said no, 2 on error.
set -eu
url="${FREQGUARD_SERVICE:-http://127.0.0.1:8080}"
policy="$1" recipient="$2" content="$3"
# the body made by a JSON encoder (quotes, backslashes and newlines in a message escaped)
body=$(python3 -c 'import json, sys
print(json.dumps({"context": {"recipient": sys.argv[1], "content": sys.argv[2]}}))' \
  "$recipient" "$content")
answer=$(curl -sS --fail-with-body -X POST "$url/v1/policies/$policy/hit" \
  -H "content-type: application/json" \
  ${FREQGUARD_TOKEN:+-H "authorization: Bearer $FREQGUARD_TOKEN"} \
  -d "$body") || { echo "$answer" >&2; exit 2; }
echo "$answer"
case "$answer" in '{"allowed":true'*) exit 0 ;; *) exit 1 ;; esac

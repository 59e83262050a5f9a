#!/usr/bin/env bash
# The example host's whole flow with curl, against `go run ./examples/host -dev`
# (start it first, in another terminal). Needs curl, sha256sum and base64.
# Run it again after restarting the host: the same humans and agents carry
# on. With --leave-pending it also leaves a request from carol's agent in
# bob's inbox, for you to decide in a browser (sign in as bob).
set -eu
leave_pending=no
[ "${1:-}" = "--leave-pending" ] && leave_pending=yes
H=${H:-http://127.0.0.1:8080}
json='Content-Type: application/json'
# call is curl that stops the script on an HTTP error, printing the host's
# JSON error ({"error":{"code","message"}}) instead of failing silently.
call() {
  local out code
  out=$(curl -s -w '\n%{http_code}' "$@") || { echo "curl failed: $*" >&2; exit 1; }
  code=${out##*$'\n'}
  if [ "$code" -ge 400 ]; then echo "HTTP $code from ${*: -1}: ${out%$'\n'*}" >&2; exit 1; fi
  printf '%s' "${out%$'\n'*}"
}
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }   # the first string field of that name
b64url() { base64 | tr '+/' '-_' | tr -d '=\n'; }
card() { echo "{\"discoverable\":true,\"card\":{\"name\":\"$2\",\"description\":\"$3\",\"version\":\"1.0\",\"supportedInterfaces\":[{\"url\":\"$H/agents/$1/\",\"protocolBinding\":\"urn:switchboard:discovery:v1\",\"protocolVersion\":\"1.0\"}],\"capabilities\":{},\"defaultInputModes\":[\"application/json\"],\"defaultOutputModes\":[\"application/json\"],\"skills\":[]}}"; }
jar=$(mktemp -d)

echo "== bob and alice sign in (dev) and publish their agents"
call -c "$jar/bob" -H "$json" -d '{"subject":"bob","name":"Bob Example","email":"bob@example.com"}' "$H/dev/login" >/dev/null
call -c "$jar/alice" -H "$json" -d '{"subject":"alice","name":"Alice Example","email":"alice@example.com"}' "$H/dev/login" >/dev/null
call -b "$jar/bob" -X PUT -H "$json" -d "$(card bob-desk 'Bob desk' 'Pays invoices')" "$H/me/personas/bob-desk" >/dev/null
call -b "$jar/alice" -X PUT -H "$json" -d "$(card alice-bot 'Alice bot' 'Books travel')" "$H/me/personas/alice-bot" >/dev/null
call "$H/agents/bob-desk/.well-known/agent-card.json"; echo

echo "== alice-bot asks: its pickup secret stays with it, the request carries its hash"
secret="sbp_$(head -c 32 /dev/urandom | b64url)"
pickup=$(printf "$(printf %s "$secret" | sha256sum | cut -d" " -f1 | sed "s/../\\\\x&/g")" | b64url)
req="{\"from\":\"alice-bot\",\"to\":\"bob-desk\",\"scope\":[{\"queue\":\"inbox\",\"verbs\":[\"create_for\",\"get\"]}],\"why\":\"I forward invoices\",\"pickup\":\"$pickup\""
nonce=$(call -H "$json" -d "$req}" "$H/friend-requests/nonce" | field nonce)
token=$(call -H "$json" -d "{\"subject\":\"alice\",\"nonce\":\"$nonce\"}" "$H/dev/id-token" | field id_token)
edge=$(call -H "$json" -d "$req,\"id_token\":\"$token\"}" "$H/agents/bob-desk/friend-requests" | field id)
echo "edge $edge"

echo "== bob reads his approvals and approves, narrowed to create_for"
call -b "$jar/bob" "$H/me/approvals" | grep -o "\"why\":\"[^\"]*\"" | head -n 1
call -b "$jar/bob" -H "$json" -d '{"scope":[{"queue":"inbox","verbs":["create_for"]}]}' "$H/me/edges/$edge/approve" >/dev/null

echo "== alice-bot collects its credential (once) and hands bob work over MCP"
cred=$(call -H "$json" -d "{\"secret\":\"$secret\"}" "$H/edges/$edge/collect" | field credential)
mcp() { call -H "$json" -H 'Accept: application/json, text/event-stream' -H "Authorization: Bearer $cred" "$@" "$H/mcp"; }
session=$(mcp -D - -o /dev/null -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}' | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
mcp -H "Mcp-Session-Id: $session" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
mcp -H "Mcp-Session-Id: $session" -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_for","arguments":{"queue":"inbox","kind":"invoice.pay","payload":{"cents":12900}}}}'
echo

if [ "$leave_pending" = yes ]; then
  echo "== carol's agent asks bob-desk too; the request waits in bob's inbox"
  call -c "$jar/carol" -H "$json" -d '{"subject":"carol","name":"Carol Example","email":"carol@example.com"}' "$H/dev/login" >/dev/null
  call -b "$jar/carol" -X PUT -H "$json" -d "$(card carol-bot 'Carol receipts' 'Sends receipts')" "$H/me/personas/carol-bot" >/dev/null
  # A fixed pickup: the same request again is the same pending request.
  cpickup=$(printf "$(printf %s carol-walkthrough | sha256sum | cut -d" " -f1 | sed "s/../\\\\x&/g")" | b64url)
  creq="{\"from\":\"carol-bot\",\"to\":\"bob-desk\",\"scope\":[{\"queue\":\"inbox\",\"verbs\":[\"create_for\",\"claim\"]}],\"why\":\"Please let me send you receipts\",\"pickup\":\"$cpickup\""
  nonce=$(call -H "$json" -d "$creq}" "$H/friend-requests/nonce" | field nonce)
  token=$(call -H "$json" -d "{\"subject\":\"carol\",\"nonce\":\"$nonce\"}" "$H/dev/id-token" | field id_token)
  call -H "$json" -d "$creq,\"id_token\":\"$token\"}" "$H/agents/bob-desk/friend-requests" >/dev/null
  echo "pending: open $H/ in a browser and sign in as bob to decide"
fi
rm -r "$jar"

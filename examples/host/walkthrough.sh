#!/usr/bin/env bash
# The example host's whole flow with curl, against `go run ./examples/host -dev`
# (start it first, in another terminal). Needs curl, sha256sum and base64.
set -eu
H=${H:-http://127.0.0.1:8080}
json='Content-Type: application/json'
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }   # the first string field of that name
b64url() { base64 | tr '+/' '-_' | tr -d '=\n'; }
card() { echo "{\"discoverable\":true,\"card\":{\"name\":\"$2\",\"description\":\"$3\",\"version\":\"1.0\",\"supportedInterfaces\":[{\"url\":\"$H/agents/$1/\",\"protocolBinding\":\"urn:switchboard:discovery:v1\",\"protocolVersion\":\"1.0\"}],\"capabilities\":{},\"defaultInputModes\":[\"application/json\"],\"defaultOutputModes\":[\"application/json\"],\"skills\":[]}}"; }
jar=$(mktemp -d)

echo "== bob and alice sign in (dev) and publish their agents"
curl -sfc "$jar/bob" -H "$json" -d '{"subject":"bob"}' "$H/dev/login" >/dev/null
curl -sfc "$jar/alice" -H "$json" -d '{"subject":"alice"}' "$H/dev/login" >/dev/null
curl -sfb "$jar/bob" -X PUT -H "$json" -d "$(card bob-desk 'Bob desk' 'Pays invoices')" "$H/me/personas/bob-desk" >/dev/null
curl -sfb "$jar/alice" -X PUT -H "$json" -d "$(card alice-bot 'Alice bot' 'Books travel')" "$H/me/personas/alice-bot" >/dev/null
curl -sf "$H/agents/bob-desk/.well-known/agent-card.json"; echo

echo "== alice-bot asks: its pickup secret stays with it, the request carries its hash"
secret="sbp_$(head -c 32 /dev/urandom | b64url)"
pickup=$(printf "$(printf %s "$secret" | sha256sum | cut -d" " -f1 | sed "s/../\\\\x&/g")" | b64url)
req="{\"from\":\"alice-bot\",\"to\":\"bob-desk\",\"scope\":[{\"queue\":\"inbox\",\"verbs\":[\"create_for\",\"get\"]}],\"why\":\"I forward invoices\",\"pickup\":\"$pickup\""
nonce=$(curl -sf -H "$json" -d "$req}" "$H/friend-requests/nonce" | field nonce)
token=$(curl -sf -H "$json" -d "{\"subject\":\"alice\",\"nonce\":\"$nonce\"}" "$H/dev/id-token" | field id_token)
edge=$(curl -sf -H "$json" -d "$req,\"id_token\":\"$token\"}" "$H/agents/bob-desk/friend-requests" | field id)
echo "edge $edge"

echo "== bob reads his approvals and approves, narrowed to create_for"
curl -sfb "$jar/bob" "$H/me/approvals" | grep -o "\"why\":\"[^\"]*\"" | head -n 1
curl -sfb "$jar/bob" -H "$json" -d '{"scope":[{"queue":"inbox","verbs":["create_for"]}]}' "$H/me/edges/$edge/approve" >/dev/null

echo "== alice-bot collects its credential (once) and hands bob work over MCP"
cred=$(curl -sf -H "$json" -d "{\"secret\":\"$secret\"}" "$H/edges/$edge/collect" | field credential)
mcp() { curl -sf -H "$json" -H 'Accept: application/json, text/event-stream' -H "Authorization: Bearer $cred" "$@" "$H/mcp"; }
session=$(mcp -D - -o /dev/null -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}' | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
mcp -H "Mcp-Session-Id: $session" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
mcp -H "Mcp-Session-Id: $session" -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_for","arguments":{"queue":"inbox","kind":"invoice.pay","payload":{"cents":12900}}}}'
echo
rm -r "$jar"

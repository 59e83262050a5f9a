module github.com/switchboardhq/switchboard/examples/host

go 1.26.8

require (
	github.com/a2aproject/a2a-go v0.3.3
	github.com/chromedp/chromedp v0.23.1
	github.com/coreos/go-oidc/v3 v3.21.0
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/stretchr/testify v1.12.1
	github.com/switchboardhq/switchboard v0.0.0
	github.com/switchboardhq/switchboard/mcptools v0.0.0
	golang.org/x/mod v0.43.0
	golang.org/x/oauth2 v0.36.0
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-jose/go-jose/v4 v4.1.9 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gowebpki/jcs v1.0.1 // indirect
	github.com/mtibben/confusables v0.0.0-20210201002637-9d1b0723b659 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace (
	github.com/switchboardhq/switchboard => ../../
	github.com/switchboardhq/switchboard/mcptools => ../../mcptools
)

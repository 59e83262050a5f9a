module github.com/switchboardhq/switchboard

go 1.26.8

require (
	filippo.io/torchwood v0.6.1
	github.com/coreos/go-oidc/v3 v3.21.0
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/google/btree v1.1.3
	github.com/gowebpki/jcs v1.0.1
	github.com/mtibben/confusables v0.0.0-20210201002637-9d1b0723b659
	github.com/stretchr/testify v1.12.1
	go.etcd.io/bbolt v1.5.0
	golang.org/x/crypto v0.38.0
	golang.org/x/mod v0.43.0
	pgregory.net/rapid v1.3.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

module github.com/switchboardhq/switchboard/store/postgres

go 1.26.8

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/jackc/pgx/v5 v5.13.0
	github.com/stretchr/testify v1.12.1
	github.com/switchboardhq/switchboard v0.0.0
)

require (
	github.com/coreos/go-oidc/v3 v3.21.0 // indirect
	github.com/go-jose/go-jose/v4 v4.1.9 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/gowebpki/jcs v1.0.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mtibben/confusables v0.0.0-20210201002637-9d1b0723b659 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/mod v0.43.0 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/switchboardhq/switchboard => ../..

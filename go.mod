module github.com/airlock-sandbox/airlock

go 1.26.0

require (
	github.com/expr-lang/expr v1.17.8
	github.com/miekg/dns v1.1.73
	github.com/opencontainers/runtime-spec v1.3.0
	github.com/stretchr/testify v1.12.1
	github.com/tetratelabs/wazero v1.12.0
	github.com/yuin/goldmark v1.8.7
	go.starlark.net v0.0.0-20260908191801-89a6a09411d5
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.44.0 // indirect
	golang.org/x/time v0.16.0
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/modelcontextprotocol/go-sdk v1.8.0

require (
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/oauth2 v0.35.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)

module simpler

go 1.26.0

require (
	github.com/chzyer/readline v1.5.1
	github.com/fatih/color v1.19.0
	go.starlark.net v0.0.0-20260908191801-89a6a09411d5
	golang.org/x/sys v0.50.0
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
)

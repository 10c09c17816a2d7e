module phalanx.dev/hack/pause

go 1.26.0

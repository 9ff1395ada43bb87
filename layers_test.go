package orderly_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The storeys of the tree, lowest first (docs/architecture.md "Layers"): a package may import
// packages of its own storey or a lower one, never a higher one; a feature never imports
// another feature; production code (storeys domain to engine) never imports the test kit.
const (
	layerDomain  = iota // the root package and stdlib-only helpers
	layerStore          // the storage seam and its dialects; telemetry (a leaf every storey reports to)
	layerCore           // flow-agnostic machinery: closer, outbox relay, jobs, sagas, barrier
	layerApp            // application services on the ports
	layerFeature        // one package per flow
	layerAdapter        // HTTP API, payment channels, Redis, NATS
	layerEngine         // builds the rest
	layerTool           // simulate, verify, bench, examples
	layerCmd            // flags and commands only
	layerTestKit        // test servers, fault injection, test doubles: tools and tests only
)

// layers maps a package path (relative to the module, "" for the root) or a path prefix
// ending in "/" to its storey; the longest match wins.
var layers = map[string]int{
	"": layerDomain, "internal/redact": layerDomain, "internal/batchctx": layerDomain,
	"store": layerStore, "store/sqlstore": layerStore, "telemetry": layerStore,
	"barrier": layerCore, "wakeup": layerCore, "job": layerCore, "outbox": layerCore, "saga": layerCore, "closer": layerCore,
	"order": layerApp, "payment": layerApp, "wallet": layerApp, "reconcile": layerApp, "admin": layerApp,
	"apikey": layerApp, "idempotency": layerApp, "webhook": layerApp, "feature": layerApp, // the seam every feature builds on
	"groupbuy": layerFeature, "ride": layerFeature, "checkout": layerFeature,
	"httpapi": layerAdapter, "channel": layerAdapter, "channel/": layerAdapter, "redisq": layerAdapter,
	"natspub":  layerAdapter,
	"engine":   layerEngine,
	"features": layerEngine, // the list cmd/orderly passes to engine.Open
	"simulate": layerTool, "simulate/": layerTool, "verify": layerTool, "bench": layerTool, "bench/": layerTool,
	"examples/": layerTool,
	"cmd/":      layerCmd,
	"internal/": layerTestKit, "mock": layerTestKit, "store/storetest": layerTestKit, "httpapi/e2e": layerTestKit,
	"channel/alipay/alipaytest": layerTestKit,
	"channel/stripe/stripetest": layerTestKit, "channel/wechatpay/wechatpaytest": layerTestKit,
}

// maxAgainstLayers is how many imports may still run against the storeys: it only goes down.
const maxAgainstLayers = 3

func layerOf(rel string) (int, bool) {
	best, layer := -1, 0
	for key, l := range layers {
		if (key == rel || strings.HasSuffix(key, "/") && strings.HasPrefix(rel, key)) && len(key) > best {
			best, layer = len(key), l
		}
	}
	return layer, best >= 0
}

// TestLayers checks the imports of every package of the module (tests excluded) against the
// storeys above. A new package must be given its storey in layers.
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/orderlyhq/orderly"
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	var against []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		from := rel(f[0])
		a, ok := layerOf(from)
		if !ok {
			t.Errorf("package %q has no storey: add it to layers in layers_test.go", from)
			continue
		}
		for _, imp := range f[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := rel(imp)
			b, ok := layerOf(to)
			if !ok {
				continue // reported as a package of its own
			}
			switch {
			case b == layerTestKit && a < layerTool:
				against = append(against, from+" -> "+to+" (production code imports the test kit)")
			case b == layerTestKit:
			case b > a:
				against = append(against, from+" -> "+to)
			case a == layerFeature && b == layerFeature && from != to:
				against = append(against, from+" -> "+to+" (a feature imports another)")
			}
		}
	}
	slices.Sort(against)
	for _, s := range against {
		t.Logf("against the storeys: %s", s)
	}
	if len(against) > maxAgainstLayers {
		t.Errorf("%d imports run against the storeys, at most %d may (the list above)", len(against), maxAgainstLayers)
	}
}

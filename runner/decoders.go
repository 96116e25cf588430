package runner

import (
	"fmt"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/pglogical"
	"github.com/synchro/synchro/runner/decode/pgoutput"
	"github.com/synchro/synchro/runner/decode/wal2json"
)

// PluginFor returns the output plugin of decoder name, a Config.Decoder value
// ("" is pgoutput). pglogical is known so that choosing it is refused at start
// by capability, with the capability named, rather than as an unknown name.
func PluginFor(name string) (decode.Plugin, error) {
	switch name {
	case "", pgoutput.Name:
		return pgoutput.Plugin{}, nil
	case wal2json.Name:
		return wal2json.Plugin{}, nil
	case "pglogical", pglogical.Name:
		return pglogical.Plugin{}, nil
	}
	return nil, fmt.Errorf("synchro: runner: decoder %q: want pgoutput or wal2json", name)
}

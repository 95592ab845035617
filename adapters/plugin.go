package adapters

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is shared by the agent and every adapter plugin. It is a UX
// check (running a plugin binary by hand prints a helpful message), not
// security.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "HARVEST_ADAPTER_PLUGIN",
	MagicCookieValue: "a1f3c0de-harvest-adapter",
}

// PluginName is the name under which the adapter is dispensed.
const PluginName = "adapter"

// OptionsEnv carries the adapter's options (a JSON object of strings) from
// the agent to the plugin process.
const OptionsEnv = "HARVEST_ADAPTER_OPTIONS"

// GRPCPlugin is the go-plugin glue. The host leaves Impl nil; the plugin
// process sets it to the adapter it serves.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Adapter
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the adapter service on the plugin's gRPC server.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("adapter plugin: no implementation to serve")
	}
	s.RegisterService(&serviceDesc, &server{impl: p.Impl})
	return nil
}

// GRPCClient returns the host-side Adapter that forwards every call.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &Client{conn: c}, nil
}

// Serve serves impl as a plugin on stdin/stdout; it returns when the host
// goes away. Logs must go to stderr: stdout carries the handshake.
func Serve(impl Adapter, logger hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         map[string]plugin.Plugin{PluginName: &GRPCPlugin{Impl: impl}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}

// Launched is an adapter running in a plugin process.
type Launched struct {
	Adapter
	client *plugin.Client
}

// Close kills the plugin process.
func (l *Launched) Close() { l.client.Kill() }

// Exited reports whether the plugin process has exited.
func (l *Launched) Exited() bool { return l.client.Exited() }

// Launch starts cmd as an adapter plugin and returns the adapter it
// serves. The options are handed to the plugin in OptionsEnv. The plugin
// is killed on every error path.
func Launch(cmd *exec.Cmd, options map[string]string, logger hclog.Logger) (*Launched, error) {
	env, err := encodeOptions(options)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Environ(), OptionsEnv+"="+env)
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "adapter", Level: hclog.Warn})
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          map[string]plugin.Plugin{PluginName: &GRPCPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		StartTimeout:     30 * time.Second,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start adapter plugin %s: %w", cmd.Path, err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("dispense adapter from %s: %w", cmd.Path, err)
	}
	ad, ok := raw.(Adapter)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("plugin %s does not serve an adapter", cmd.Path)
	}
	return &Launched{Adapter: ad, client: client}, nil
}

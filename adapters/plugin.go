package adapters

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
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
//
// The process exits as soon as the process that started it dies, however
// it dies: a host killed with SIGKILL never tells go-plugin, whose server
// would otherwise run on forever, re-parented to init.
func Serve(impl Adapter, logger hclog.Logger) {
	go watchParent(os.Getppid(), func() {
		logger.Error("the agent that started this adapter plugin is gone; exiting")
		os.Exit(1)
	})
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

// JobEvents passes the plugin's job-event count on (the embedded Adapter
// alone would hide it): ErrNotImplemented from a plugin that keeps none.
func (l *Launched) JobEvents(ctx context.Context) (int64, error) {
	jc, ok := l.Adapter.(JobEventCounter)
	if !ok {
		return 0, fmt.Errorf("job events: %w", ErrNotImplemented)
	}
	return jc.JobEvents(ctx)
}

// Close kills the plugin process.
func (l *Launched) Close() { l.client.Kill() }

// Pid is the plugin process's id (0 if it is not known).
func (l *Launched) Pid() int {
	if rc := l.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

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

// watchParent calls gone once process ppid, this process's parent, has
// exited. It waits on a pidfd of the parent (an event, Linux 5.3+), or,
// where the kernel has none, notices the re-parenting once a second. A
// parent-death signal (PR_SET_PDEATHSIG) is not used: it fires when the
// parent's *thread* that started the plugin ends, which the Go runtime
// does not promise to keep.
func watchParent(ppid int, gone func()) {
	if ppid <= 1 {
		return // started by init: there is no agent to outlive
	}
	fd, err := unix.PidfdOpen(ppid, 0)
	if err == nil {
		defer unix.Close(fd)
		// The parent may have died before the pidfd was opened (and its
		// pid been reused): then this process has been re-parented.
		for os.Getppid() == ppid {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		gone()
		return
	}
	for os.Getppid() == ppid {
		time.Sleep(time.Second)
	}
	gone()
}

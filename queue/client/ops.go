package client

import (
	"context"
	"net/http"

	"github.com/harvest-hpc/harvest/queue/api"
)

// Harvest returns the agent's pause and drain state (admin).
func (c *Client) Harvest(ctx context.Context) (api.HarvestState, error) {
	var s api.HarvestState
	return s, c.do(ctx, http.MethodGet, api.PathHarvest, nil, nil, &s, true)
}

// Agent tells where the running agent keeps its files (admin).
func (c *Client) Agent(ctx context.Context) (api.AgentInfo, error) {
	var a api.AgentInfo
	return a, c.do(ctx, http.MethodGet, api.PathAgent, nil, nil, &a, true)
}

// SetPaused pauses (no new pilots) or resumes harvesting (admin).
func (c *Client) SetPaused(ctx context.Context, paused bool) (api.HarvestState, error) {
	var s api.HarvestState
	return s, c.do(ctx, http.MethodPut, api.PathHarvest, nil, api.HarvestSettings{Paused: &paused}, &s, true)
}

// Drain pauses and cancels every pilot: idle ones at once, busy ones
// after their batch, or all at once with now (admin). Starting a drain
// again restarts its progress, so it is safe to retry.
func (c *Client) Drain(ctx context.Context, now bool) (api.HarvestState, error) {
	var s api.HarvestState
	return s, c.do(ctx, http.MethodPost, api.PathDrain, nil, api.DrainRequest{Now: now}, &s, true)
}

// RotateToken revokes every token of a user with a role and returns a new
// one (admin; never retried: a lost answer would leave no usable token,
// so the caller runs it again).
func (c *Client) RotateToken(ctx context.Context, req api.TokenRotateRequest) (api.TokenRotation, error) {
	var t api.TokenRotation
	return t, c.do(ctx, http.MethodPost, api.PathTokenRotate, nil, req, &t, false)
}

package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/harvest-hpc/harvest/queue/api"
)

// AgentRegister registers the token the site's pilots present (agent role;
// safe to retry: registering the same token again changes nothing).
func (c *Client) AgentRegister(ctx context.Context, req api.AgentRegistration) (api.AgentWelcome, error) {
	var w api.AgentWelcome
	return w, c.do(ctx, http.MethodPost, api.PathAgentRegister, nil, req, &w, true)
}

// AgentRound reports what the site's agent saw and returns the site's
// plan for the round (agent role; a report, safe to retry).
func (c *Client) AgentRound(ctx context.Context, req api.AgentRound) (api.AgentPlan, error) {
	var p api.AgentPlan
	return p, c.do(ctx, http.MethodPost, api.PathAgentRound, nil, req, &p, true)
}

// AgentEnd tells the queue that the agent pulled a pilot's end in (agent
// role; safe to retry: an end already known changes nothing).
func (c *Client) AgentEnd(ctx context.Context, e api.PilotEnd) error {
	return c.do(ctx, http.MethodPost, api.PathAgentEnd, nil, e, &struct{}{}, true)
}

// Sites lists the sites with their figures (admin).
func (c *Client) Sites(ctx context.Context) (api.SiteList, error) {
	var l api.SiteList
	return l, c.do(ctx, http.MethodGet, api.PathSites, nil, nil, &l, true)
}

// AddSite creates a site and returns its agent token, shown once (admin;
// never retried: a lost answer would leave a token nobody saw, so the
// admin runs it again, which replaces the token).
func (c *Client) AddSite(ctx context.Context, name string) (api.SiteToken, error) {
	var t api.SiteToken
	return t, c.do(ctx, http.MethodPost, api.PathSite+url.PathEscape(name), nil, struct{}{}, &t, false)
}

// SetSite changes a site's floor, cap or pause (admin).
func (c *Client) SetSite(ctx context.Context, name string, s api.SiteSettings) (api.Site, error) {
	var out api.Site
	return out, c.do(ctx, http.MethodPut, api.PathSite+url.PathEscape(name), nil, s, &out, true)
}

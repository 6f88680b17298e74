package mcpwrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"mime"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxListed bounds each of the wrapped server's lists (tools, prompts,
// resources) the wrapper follows: its items, repeated ones included, and
// its pages.
const maxListed = 1000

// promptMessageCost is the share of the result cap that allows one more
// message of a prompt to be relayed.
const promptMessageCost = 64

// listed pages through one of the wrapped server's lists (what names it),
// page fetching one page after cursor: it stops with an error past
// maxListed items or pages, however the server answers (empty pages, the
// same items again, a cursor that never ends).
func listed[T any](ctx context.Context, what string, page func(ctx context.Context, cursor string) ([]*T, string, error)) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		cursor, n := "", 0
		for pages := 1; ; pages++ {
			if pages > maxListed {
				yield(nil, fmt.Errorf("listing the wrapped server's %s: more than %d pages", what, maxListed))
				return
			}
			items, next, err := page(ctx, cursor)
			if err != nil {
				yield(nil, fmt.Errorf("listing the wrapped server's %s: %w", what, err))
				return
			}
			for _, it := range items {
				if n++; n > maxListed {
					yield(nil, fmt.Errorf("listing the wrapped server's %s: more than %d", what, maxListed))
					return
				}
				if it != nil && !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

func (w *Wrapper) tools(ctx context.Context) iter.Seq2[*mcp.Tool, error] {
	return listed(ctx, "tools", func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
		r, err := w.up.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return r.Tools, r.NextCursor, nil
	})
}

func (w *Wrapper) promptList(ctx context.Context) iter.Seq2[*mcp.Prompt, error] {
	return listed(ctx, "prompts", func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
		r, err := w.up.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return r.Prompts, r.NextCursor, nil
	})
}

func (w *Wrapper) resourceList(ctx context.Context) iter.Seq2[*mcp.Resource, error] {
	return listed(ctx, "resources", func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
		r, err := w.up.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return r.Resources, r.NextCursor, nil
	})
}

// refreshPrompts offers the agent the wrapped server's prompts when the
// policy relays them, as refresh does tools: descriptions sanitised and
// capped, a prompt gone from the list withdrawn.
func (w *Wrapper) refreshPrompts(ctx context.Context) error {
	if !w.cfg.Policy.relays(w.cfg.Policy.Prompts) || w.up.InitializeResult().Capabilities.Prompts == nil {
		return nil
	}
	now := map[string]bool{}
	for p, err := range w.promptList(ctx) {
		if err != nil {
			return err
		}
		if p.Name == "" || len(p.Name) > maxOffered || now[p.Name] {
			continue
		}
		offer := &mcp.Prompt{Name: p.Name, Title: w.text(p.Title, maxDescription), Description: w.text(p.Description, maxDescription)}
		for _, a := range p.Arguments {
			if a != nil {
				offer.Arguments = append(offer.Arguments, &mcp.PromptArgument{Name: a.Name, Title: w.text(a.Title, maxDescription),
					Description: w.text(a.Description, maxDescription), Required: a.Required})
			}
		}
		key, _ := json.Marshal(offer)
		if len(key) > maxOffered {
			w.audit(Record{Event: "list", Prompt: w.text(p.Name, maxDescription), Decision: "hidden",
				Reason: fmt.Sprintf("%d bytes as JSON, over the limit of %d", len(key), maxOffered)})
			continue
		}
		now[p.Name] = true
		if w.prompts[p.Name] == string(key) {
			continue
		}
		w.srv.AddPrompt(offer, w.promptHandler(p.Name))
		w.prompts[p.Name] = string(key)
		w.audit(Record{Event: "list", Prompt: p.Name, Decision: "listed"})
	}
	if gone := w.withdraw(w.prompts, now, func(name string) Record { return Record{Prompt: name} }); len(gone) > 0 {
		w.srv.RemovePrompts(gone...)
	}
	return nil
}

// refreshResources offers the agent the wrapped server's listed resources
// when the policy relays them. Only listed resources can be read: the
// server's resource templates, which would let the agent name any URI,
// are not offered.
func (w *Wrapper) refreshResources(ctx context.Context) error {
	if !w.cfg.Policy.relays(w.cfg.Policy.Resources) || w.up.InitializeResult().Capabilities.Resources == nil {
		return nil
	}
	now := map[string]bool{}
	for r, err := range w.resourceList(ctx) {
		if err != nil {
			return err
		}
		if len(r.URI) > maxOffered || now[r.URI] {
			continue
		}
		offer := &mcp.Resource{URI: r.URI, Name: w.text(r.Name, maxDescription), Title: w.text(r.Title, maxDescription),
			Description: w.text(r.Description, maxDescription), MIMEType: mediaType(r.MIMEType), Size: r.Size}
		key, _ := json.Marshal(offer)
		if len(key) > maxOffered {
			w.audit(Record{Event: "list", Resource: w.text(r.URI, maxDescription), Decision: "hidden",
				Reason: fmt.Sprintf("%d bytes as JSON, over the limit of %d", len(key), maxOffered)})
			continue
		}
		now[r.URI] = true
		if w.resources[r.URI] == string(key) {
			continue
		}
		if err := addResource(w.srv, offer, w.resourceHandler()); err != nil {
			delete(now, r.URI)
			w.audit(Record{Event: "list", Resource: r.URI, Decision: "hidden", Reason: err.Error()})
			continue
		}
		w.resources[r.URI] = string(key)
		w.audit(Record{Event: "list", Resource: r.URI, Decision: "listed"})
	}
	if gone := w.withdraw(w.resources, now, func(uri string) Record { return Record{Resource: uri} }); len(gone) > 0 {
		w.srv.RemoveResources(gone...)
	}
	return nil
}

// addResource adds a resource, turning the SDK's panic on a URI it cannot
// take (the wrapped server chose it) into an error.
func addResource(srv *mcp.Server, r *mcp.Resource, h mcp.ResourceHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed resource: %v", p)
		}
	}()
	srv.AddResource(r, h)
	return nil
}

// promptHandler relays prompts/get: the arguments pass the policy's
// size limit and refused patterns, and the messages' text the sanitiser
// and the result cap; other content is withheld.
func (w *Wrapper) promptHandler(name string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		start := w.cfg.Now()
		rec := Record{Event: "prompt", Prompt: name}
		refuse := func(decision, why string) (*mcp.GetPromptResult, error) {
			rec.Decision, rec.Reason = decision, why
			w.audit(rec)
			return nil, errors.New("airlock: " + why)
		}
		args, err := json.Marshal(req.Params.Arguments)
		if err != nil {
			return refuse("invalid", err.Error())
		}
		rec.ArgsBytes = len(args)
		if max := w.cfg.Policy.maxArgs(""); len(args) > max {
			return refuse("denied", fmt.Sprintf("the arguments of prompt %s are %d bytes, over the limit of %d", name, len(args), max))
		}
		if err := w.defArgs.check(args); err != nil {
			return refuse("denied", fmt.Sprintf("prompt %s: %v", name, err))
		}
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		defer cancel()
		res, err := w.up.GetPrompt(cctx, &mcp.GetPromptParams{Name: name, Arguments: req.Params.Arguments})
		rec.DurationMS = w.cfg.Now().Sub(start).Milliseconds()
		if err != nil {
			return refuse("failed", fmt.Sprintf("the wrapped server failed prompt %s: %s", name, w.failure(err)))
		}
		out := &mcp.GetPromptResult{Description: w.text(res.Description, maxDescription)}
		// Consecutive messages of one role are one turn to the client:
		// they are sanitised together, and relayed as one message.
		// The messages are bounded as well as their text: one per
		// promptMessageCost bytes of the cap, so that many short messages
		// cannot outgrow it; the rest are dropped with a note.
		budget := w.cfg.MaxResultBytes
		messages := max(2, w.cfg.MaxResultBytes/promptMessageCost)
		var turn block
		var role mcp.Role
		flush := func() {
			if role != "" {
				out.Messages = append(out.Messages, &mcp.PromptMessage{Role: role, Content: &mcp.TextContent{Text: w.joined(&turn, &budget, &rec)}})
			}
			turn = block{}
		}
		for _, m := range res.Messages {
			if m == nil {
				continue
			}
			r := m.Role
			if r != "user" && r != "assistant" {
				r = "user"
			}
			if r != role {
				flush()
				if len(out.Messages) == messages {
					role = ""
					if last := out.Messages[len(out.Messages)-1].Content.(*mcp.TextContent); !rec.Truncated {
						last.Text += fmt.Sprintf("\n[airlock: result truncated at %d bytes: further messages withheld]", w.cfg.MaxResultBytes)
					}
					rec.Truncated = true
					break
				}
				role = r
			}
			turn.add(m.Content, &rec)
		}
		flush()
		rec.Decision = "relayed"
		w.audit(rec)
		return out, nil
	}
}

// resourceHandler relays resources/read of a listed resource (the SDK
// answers any other URI as not found) as one text under the URI read: the
// contents' text sanitised and capped, binary content withheld.
func (w *Wrapper) resourceHandler() mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		start := w.cfg.Now()
		uri := req.Params.URI
		rec := Record{Event: "read", Resource: uri}
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		defer cancel()
		res, err := w.up.ReadResource(cctx, &mcp.ReadResourceParams{URI: uri})
		rec.DurationMS = w.cfg.Now().Sub(start).Milliseconds()
		if err != nil {
			rec.Decision, rec.Reason = "failed", w.failure(err)
			w.audit(rec)
			return nil, fmt.Errorf("airlock: the wrapped server failed reading %s: %s", uri, rec.Reason)
		}
		// A resource's contents are sanitised together (see block), and
		// relayed as one text.
		rc := &mcp.ResourceContents{URI: uri, MIMEType: "text/plain"}
		var all block
		for _, c := range res.Contents {
			if c == nil {
				continue
			}
			if len(res.Contents) == 1 && c.Blob == nil && mediaType(c.MIMEType) != "" {
				rc.MIMEType = c.MIMEType
			}
			if c.Blob == nil {
				all.texts = append(all.texts, c.Text)
			} else {
				all.withhold("binary", &rec)
			}
		}
		budget := w.cfg.MaxResultBytes
		rc.Text = w.joined(&all, &budget, &rec)
		out := &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}
		rec.Decision = "relayed"
		w.audit(rec)
		return out, nil
	}
}

// capped sanitises untrusted text and cuts it to what is left of budget.
func (w *Wrapper) capped(s string, budget *int, rec *Record) string {
	rec.ResultBytes += len(s)
	text, findings := w.san.Markdown([]byte(s))
	rec.Findings += len(findings)
	s = string(text)
	if len(s) > *budget {
		s = strings.ToValidUTF8(s[:*budget], "") + fmt.Sprintf("\n[airlock: result truncated at %d bytes]", w.cfg.MaxResultBytes)
		rec.Truncated = true
	}
	*budget -= min(len(s), *budget)
	return s
}

// mediaType is the wrapped server's MIME type when it is a short, well
// formed one, else "".
func mediaType(s string) string {
	if len(s) > 128 {
		return ""
	}
	if _, _, err := mime.ParseMediaType(s); err != nil {
		return ""
	}
	return s
}

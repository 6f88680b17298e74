package expr

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/optimizer"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/airlock-sandbox/airlock"
)

// maxTreeDepth bounds the syntax tree's depth (chains of unary operators
// or of left-associative binary operators nest without brackets).
const maxTreeDepth = 1000

// allowedBuiltins are expr's builtins that may be called as they are.
// Those that can multiply their input's size are replaced (see replaced:
// split, for one, makes a 16-byte string of every byte of its input);
// timezone (reads the host's zone database) is absent on purpose, and so
// are findLast and findLastIndex: expr's backward loop leaves one value on
// the VM stack per element it visits, memory no budget sees, and a wrong
// operand for whatever the call is part of (1 + findLast(...) adds a bool).
// last(filter(...)) stays a filter here, because filter is charged.
var allowedBuiltins = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "filter": true, "map": true,
	"find": true, "findIndex": true,
	"count": true, "sum": true, "groupBy": true, "sortBy": true, "reduce": true,
	"len": true, "type": true, "abs": true, "ceil": true, "floor": true, "round": true,
	"int": true, "float": true, "trim": true, "trimPrefix": true, "trimSuffix": true,
	"upper": true, "lower": true,
	"indexOf": true, "lastIndexOf": true, "hasPrefix": true, "hasSuffix": true,
	"max": true, "min": true, "mean": true, "median": true,
	"toBase64": true, "fromBase64": true, "duration": true, "date": true,
	"first": true, "last": true, "get": true, "take": true, "keys": true, "values": true,
	"toPairs": true, "fromPairs": true, "reverse": true, "uniq": true, "sort": true,
	"bitnot": true, "bitand": true, "bitor": true, "bitxor": true, "bitnand": true,
	"bitshl": true, "bitshr": true, "bitushr": true,
}

// scalarBuiltins return nothing new to charge for (a number, a boolean, or
// an element that already exists).
var scalarBuiltins = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "find": true, "findIndex": true,
	"count": true, "sum": true, "len": true,
	"type": true, "abs": true, "ceil": true, "floor": true, "round": true, "int": true,
	"float": true, "indexOf": true, "lastIndexOf": true, "hasPrefix": true, "hasSuffix": true,
	"max": true, "min": true, "mean": true, "median": true, "duration": true, "date": true,
	"first": true, "last": true, "get": true, "trim": true, "trimPrefix": true, "trimSuffix": true,
	"bitnot": true, "bitand": true, "bitor": true, "bitxor": true, "bitnand": true,
	"bitshl": true, "bitshr": true, "bitushr": true, "reduce": true,
}

// replaced maps the names a user writes to airlock's budgeted versions.
// They are disabled as builtins, so the parser leaves them as calls.
var replaced = map[string]string{
	"now": "__now", "repeat": "__repeat", "join": "__join", "replace": "__replace",
	"toJSON": "__toJSON", "fromJSON": "__fromJSON", "string": "__string",
	"concat": "__concat", "flatten": "__flatten",
	"split": "__split", "splitAfter": "__splitAfter",
}

var baseConfig = func() []exprlang.Option {
	opts := []exprlang.Option{
		exprlang.DisableBuiltin("timezone"),
		// The environment is always a map[string]any: say so, and the
		// compiler reads variables with a plain map index (OpLoadFast)
		// instead of a reflective fetch. Variables stay untyped, as
		// without an environment; the walker has already listed them and
		// Run refuses input that lacks one.
		exprlang.Env(map[string]any{}),
		exprlang.AllowUndefinedVariables(),
	}
	for name := range replaced {
		opts = append(opts, exprlang.DisableBuiltin(name))
	}
	for name, fn := range helpers {
		opts = append(opts, exprlang.Function(name, fn))
	}
	for name, fn := range arithHelpers {
		opts = append(opts, exprlang.Function(name, fn))
	}
	return opts
}()

// maxNodes bounds the syntax tree's size.
const maxNodes = 10_000

// configs holds compiler configurations built from baseConfig. Building
// one (expr's builtin table, then every option: a few hundred map
// insertions) costs about as much as compiling a small expression, and
// every compile would build the same one. The parser, checker, optimizer
// and compiler only read a configuration, but for the checker's cache of
// type information, which holds nothing of a job's; so each is used by one
// compile at a time and then kept for the next.
var configs sync.Pool

func getConfig() *conf.Config {
	if c, ok := configs.Get().(*conf.Config); ok {
		return c
	}
	c := conf.CreateNew()
	for _, op := range baseConfig {
		op(c)
	}
	exprlang.MaxNodes(maxNodes)(c)
	for name := range c.Disabled {
		delete(c.Builtins, name)
	}
	return c
}

// compileWith runs expr's pipeline with airlock's walk between parsing and
// type checking, so nothing recursive or exponential sees an unchecked tree.
func compileWith(code string, w *walker) (*vm.Program, error) {
	config := getConfig()
	defer configs.Put(config)
	tree, err := parser.ParseWithConfig(code, config)
	if err != nil {
		return nil, compileError(err, code)
	}
	if err := w.walk(&tree.Node, 0); err != nil {
		return nil, err
	}
	if _, err := checker.Check(tree, config); err != nil {
		return nil, compileError(err, code)
	}
	if err := optimizer.Optimize(&tree.Node, config); err != nil {
		return nil, compileError(err, code)
	}
	prog, err := compiler.Compile(tree, config)
	if err != nil {
		return nil, compileError(err, code)
	}
	return prog, nil
}

func compileError(err error, code string) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		if fe.Line == 0 {
			fe = fe.Bind(file.NewSource(code))
		}
		return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: fmt.Sprintf("%s (%d:%d)", fe.Message, fe.Line, fe.Column+1)}
	}
	return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: oneLine(err.Error())}
}

// walker checks a parsed tree against the allowlist and patches it:
// predicates tick the step budget, allocating calls charge the memory
// budget, and replaced builtins become airlock's helpers.
type walker struct {
	maxDepth   int
	needsState bool
	idents     map[string]bool
	declared   map[string]bool
}

func (w *walker) inputs() []string {
	var out []string
	for name := range w.idents {
		if !w.declared[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (w *walker) fail(n ast.Node, format string, args ...any) error {
	return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: fmt.Sprintf(format, args...) + fmt.Sprintf(" (at offset %d)", n.Location().From)}
}

func (w *walker) state() ast.Node {
	w.needsState = true
	return &ast.IdentifierNode{Value: stateVar}
}

func (w *walker) call(orig ast.Node, name string, args ...ast.Node) ast.Node {
	n := &ast.CallNode{Callee: &ast.IdentifierNode{Value: name}, Arguments: append([]ast.Node{w.state()}, args...)}
	n.SetLocation(orig.Location())
	return n
}

// isOtherLiteral reports a literal that is not a number: an arithmetic
// operation on one cannot overflow and is left to expr's type checker,
// which refuses it when compiling.
func isOtherLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.BoolNode, *ast.NilNode, *ast.BytesNode, *ast.ArrayNode, *ast.MapNode:
		return true
	}
	return false
}

func isNumberLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		return true
	}
	return false
}

func (w *walker) walk(np *ast.Node, depth int) error {
	n := *np
	if n == nil {
		return nil
	}
	if depth > maxTreeDepth {
		return w.fail(n, "expression nested more than %d deep", maxTreeDepth)
	}
	d := depth + 1
	switch x := n.(type) {
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode,
		*ast.BytesNode, *ast.ConstantNode, *ast.PointerNode:
		return nil
	case *ast.IdentifierNode:
		if strings.HasPrefix(x.Value, "__") || strings.HasPrefix(x.Value, "$") {
			return w.fail(n, "name %q is reserved", x.Value)
		}
		if w.idents == nil {
			w.idents = map[string]bool{}
		}
		w.idents[x.Value] = true
		return nil
	case *ast.UnaryNode:
		if err := w.walk(&x.Node, d); err != nil {
			return err
		}
		if x.Operator == "-" {
			w.negate(np, x)
		}
		return nil
	case *ast.BinaryNode:
		if err := w.walk(&x.Left, d); err != nil {
			return err
		}
		if err := w.walk(&x.Right, d); err != nil {
			return err
		}
		if x.Operator == "matches" && !isOtherLiteral(x.Right) && !isNumberLiteral(x.Right) {
			// A pattern made at run time is compiled at run time, for
			// about 230 bytes per byte of pattern: charged first.
			*np = w.call(x, "__matches", x.Left, x.Right)
			return nil
		}
		w.arith(np, x)
		return nil
	case *ast.ChainNode:
		return w.walk(&x.Node, d)
	case *ast.MemberNode:
		if x.Method {
			return w.fail(n, "method calls are not allowed")
		}
		if err := w.walk(&x.Node, d); err != nil {
			return err
		}
		return w.walk(&x.Property, d)
	case *ast.SliceNode:
		for _, c := range []*ast.Node{&x.Node, &x.From, &x.To} {
			if err := w.walk(c, d); err != nil {
				return err
			}
		}
		return nil
	case *ast.CallNode:
		id, ok := x.Callee.(*ast.IdentifierNode)
		if !ok {
			return w.fail(n, "method calls are not allowed")
		}
		helper, ok := replaced[id.Value]
		if !ok {
			return w.fail(n, "unknown function %q", id.Value)
		}
		for i := range x.Arguments {
			if err := w.walk(&x.Arguments[i], d); err != nil {
				return err
			}
		}
		*np = w.call(n, helper, x.Arguments...)
		return nil
	case *ast.BuiltinNode:
		if !allowedBuiltins[x.Name] {
			return w.fail(n, "function %q is not available", x.Name)
		}
		if x.Name == "date" && len(x.Arguments) > 2 {
			return w.fail(n, "date() with a time zone is not available (times are UTC)")
		}
		for i := range x.Arguments {
			if err := w.walk(&x.Arguments[i], d); err != nil {
				return err
			}
		}
		if w.checkedBuiltin(np, x) {
			return nil
		}
		if !scalarBuiltins[x.Name] {
			*np = w.call(n, "__charge", n)
		}
		return nil
	case *ast.PredicateNode:
		if err := w.walk(&x.Node, d); err != nil {
			return err
		}
		x.Node = w.call(x.Node, "__tick", x.Node)
		return nil
	case *ast.ConditionalNode:
		// The parser gives `a ?: b` one node as both condition and first
		// branch; it is walked (and patched) once and shared again.
		shared := x.Exp1 == x.Cond
		for _, c := range []*ast.Node{&x.Cond, &x.Exp1, &x.Exp2} {
			if c == &x.Exp1 && shared {
				x.Exp1 = x.Cond
				continue
			}
			if err := w.walk(c, d); err != nil {
				return err
			}
		}
		return nil
	case *ast.VariableDeclaratorNode:
		if strings.HasPrefix(x.Name, "__") || strings.HasPrefix(x.Name, "$") {
			return w.fail(n, "name %q is reserved", x.Name)
		}
		if w.declared == nil {
			w.declared = map[string]bool{}
		}
		w.declared[x.Name] = true
		if err := w.walk(&x.Value, d); err != nil {
			return err
		}
		return w.walk(&x.Expr, d)
	case *ast.SequenceNode:
		for i := range x.Nodes {
			if err := w.walk(&x.Nodes[i], d); err != nil {
				return err
			}
		}
		return nil
	case *ast.ArrayNode:
		for i := range x.Nodes {
			if err := w.walk(&x.Nodes[i], d); err != nil {
				return err
			}
		}
		return nil
	case *ast.MapNode:
		for i := range x.Pairs {
			if err := w.walk(&x.Pairs[i], d); err != nil {
				return err
			}
		}
		return nil
	case *ast.PairNode:
		if err := w.walk(&x.Key, d); err != nil {
			return err
		}
		return w.walk(&x.Value, d)
	}
	return w.fail(n, "%T is not allowed", n)
}

// plainCall is a call of one of typedHelpers, named by value.
func plainCall(orig ast.Node, name string, args ...ast.Node) ast.Node {
	fn, ok := typedHelpers[name]
	if !ok {
		panic("expr: no helper " + name)
	}
	n := &ast.CallNode{Callee: &ast.ConstantNode{Value: fn}, Arguments: args}
	n.SetLocation(orig.Location())
	return n
}

func intLiteral(orig ast.Node, v int64) ast.Node {
	n := &ast.IntegerNode{Value: int(v)}
	n.SetLocation(orig.Location())
	return n
}

// checkedOps are the binary operators whose integer results can leave
// the 64-bit range, with their literal folding and their helpers (see
// arith.go). / and ** give floats; % cannot overflow.
var checkedOps = map[string]struct {
	fold   func(x, y int64) (int64, bool)
	helper string
}{
	"+": {addInt, "__addn"},
	"-": {subInt, "__sub"},
	"*": {mulInt, "__mul"},
}

// arith replaces +, - and * by checked helpers, and a..b by one that
// refuses ranges longer than the integer range. Integer literals are
// folded here, where the result fits; float literals are left to expr's
// folding (IEEE arithmetic).
func (w *walker) arith(np *ast.Node, x *ast.BinaryNode) {
	li, lint := x.Left.(*ast.IntegerNode)
	ri, rint := x.Right.(*ast.IntegerNode)
	if x.Operator == ".." {
		if lint && rint {
			if n, ok := subInt(int64(ri.Value), int64(li.Value)); ok && n < math.MaxInt64 {
				return // expr works its length out without overflowing
			}
		}
		*np = w.call(x, "__range", x.Left, x.Right)
		return
	}
	op, ok := checkedOps[x.Operator]
	if !ok {
		return
	}
	switch {
	case lint && rint:
		if v, ok := op.fold(int64(li.Value), int64(ri.Value)); ok {
			*np = intLiteral(x, v)
			return
		}
		*np = plainCall(x, op.helper, x.Left, x.Right) // fails when run
	case isNumberLiteral(x.Left) && isNumberLiteral(x.Right):
		// A float: expr folds it.
	case x.Operator != "+" && (isOtherLiteral(x.Left) || isOtherLiteral(x.Right)),
		isNumberLiteral(x.Left) && isOtherLiteral(x.Right),
		isOtherLiteral(x.Left) && isNumberLiteral(x.Right):
		// Not arithmetic on integers: expr refuses it.
	case x.Operator == "+" && !isNumberLiteral(x.Left) && !isNumberLiteral(x.Right):
		// Possibly two strings, whose concatenation is charged.
		*np = w.call(x, "__add", x.Left, x.Right)
	default:
		*np = plainCall(x, op.helper, x.Left, x.Right)
	}
}

// negate replaces unary minus by a checked helper, folding literals.
func (w *walker) negate(np *ast.Node, x *ast.UnaryNode) {
	switch c := x.Node.(type) {
	case *ast.FloatNode:
	case *ast.StringNode, *ast.BoolNode, *ast.NilNode, *ast.BytesNode, *ast.ArrayNode, *ast.MapNode:
		// Not a number: expr refuses it.
	case *ast.IntegerNode:
		if int64(c.Value) != math.MinInt64 {
			*np = intLiteral(x, -int64(c.Value))
			return
		}
		*np = plainCall(x, "__neg", x.Node)
	default:
		*np = plainCall(x, "__neg", x.Node)
	}
}

// checkedBuiltin replaces the builtins whose integer results can leave
// the 64-bit range (int of a float, abs of the smallest integer, sum),
// reporting whether it did. The calls of int and abs with one argument
// become helpers; sum becomes a reduce with the checked +, but for the
// sum of a range of literals, folded here when it fits.
func (w *walker) checkedBuiltin(np *ast.Node, x *ast.BuiltinNode) bool {
	switch x.Name {
	case "int", "abs":
		if len(x.Arguments) != 1 {
			return false // expr's checker reports the count
		}
		*np = plainCall(x, "__"+x.Name, x.Arguments[0])
		return true
	case "sum":
		if len(x.Arguments) == 0 {
			return false
		}
		if _, isArray := x.Arguments[0].(*ast.ArrayNode); !isArray && isOtherLiteral(x.Arguments[0]) {
			return false // not an array: expr's checker says so, naming sum
		}
	default:
		return false
	}
	var elem ast.Node = &ast.PointerNode{}
	switch len(x.Arguments) {
	case 1:
		if r, ok := x.Arguments[0].(*ast.BinaryNode); ok && r.Operator == ".." {
			lo, lok := r.Left.(*ast.IntegerNode)
			hi, hok := r.Right.(*ast.IntegerNode)
			if lok && hok {
				if v, ok := rangeSum(int64(lo.Value), int64(hi.Value)); ok {
					*np = intLiteral(x, v)
				} else {
					*np = plainCall(x, "__rangeSum", lo, hi) // fails when run
				}
				return true
			}
		}
	case 2:
		p, ok := x.Arguments[1].(*ast.PredicateNode)
		if !ok {
			return false
		}
		elem = p.Node
	default:
		return false
	}
	if len(x.Arguments) == 1 {
		elem.SetLocation(x.Location())
	}
	acc := &ast.PointerNode{Name: "acc"}
	acc.SetLocation(x.Location())
	pred := &ast.PredicateNode{Node: plainCall(x, "__addn", elem, acc)}
	pred.SetLocation(x.Location())
	red := &ast.BuiltinNode{Name: "reduce", Arguments: []ast.Node{x.Arguments[0], pred, intLiteral(x, 0)}}
	red.SetLocation(x.Location())
	*np = red
	return true
}

package starlark

import (
	"fmt"

	"go.starlark.net/syntax"
)

// MaxASTDepth bounds the nesting of a parsed program. The parser stops at
// 1000 brackets, but chains of binary operators nest without a bound, and
// the resolver and compiler recurse over them.
const MaxASTDepth = 2000

// rewriter turns the operators and methods that can allocate without bound
// in a single step into calls of the hidden, growth-checked builtins:
//
//	x + y, x - y, x * y, x / y, x // y, x % y, x << y
//	                               ->  $add(x, y), $sub(x, y), $mul(x, y), ...
//	x += y                         ->  x += $grow(y)
//	x *= y (x a name; also -=, /=, //=, ...)
//	                               ->  x = $mul(x, y)
//	a[i] *= y, a.f *= y            ->  $augindex(0, a, i, y), $augattr(0, a, "f", y)
//	s.join(...) (and replace, format, split, rsplit, splitlines, extend, in_location)
//	                               ->  $attr(s, "join")(...)
//
// Additions whose operands are provably integers are left alone (see
// intNames), so counting loops keep their upstream speed.
type rewriter struct {
	ints map[string]bool // names bound only to integers anywhere in the file
	err  error
}

// rewriteFile rewrites f in place. predeclared reports the names the
// script sees from outside (input, builtins); they are never assumed to be
// integers. infer is off for session chunks, whose globals come from
// earlier runs.
func rewriteFile(f *syntax.File, infer bool, predeclared func(string) bool) error {
	r := &rewriter{}
	if infer {
		r.ints = intNames(f, predeclared)
	}
	f.Stmts = r.stmts(f.Stmts, 0)
	return r.err
}

func (r *rewriter) deep(depth int, n syntax.Node) bool {
	if depth > MaxASTDepth && r.err == nil {
		pos := syntax.Start(n)
		r.err = syntax.Error{Pos: pos, Msg: fmt.Sprintf("program nested more than %d deep", MaxASTDepth)}
	}
	return r.err != nil
}

func (r *rewriter) stmts(list []syntax.Stmt, depth int) []syntax.Stmt {
	for i, s := range list {
		list[i] = r.stmt(s, depth+1)
	}
	return list
}

func (r *rewriter) stmt(s syntax.Stmt, depth int) syntax.Stmt {
	if r.deep(depth, s) {
		return s
	}
	switch s := s.(type) {
	case *syntax.AssignStmt:
		return r.assign(s, depth)
	case *syntax.DefStmt:
		r.params(s.Params, depth)
		s.Body = r.stmts(s.Body, depth)
	case *syntax.ExprStmt:
		s.X = r.expr(s.X, depth+1)
	case *syntax.IfStmt:
		s.Cond = r.expr(s.Cond, depth+1)
		s.True = r.stmts(s.True, depth)
		s.False = r.stmts(s.False, depth)
	case *syntax.ForStmt:
		s.Vars = r.target(s.Vars, depth+1)
		s.X = r.expr(s.X, depth+1)
		s.Body = r.stmts(s.Body, depth)
	case *syntax.WhileStmt:
		s.Cond = r.expr(s.Cond, depth+1)
		s.Body = r.stmts(s.Body, depth)
	case *syntax.ReturnStmt:
		if s.Result != nil {
			s.Result = r.expr(s.Result, depth+1)
		}
	}
	return s
}

func (r *rewriter) assign(s *syntax.AssignStmt, depth int) syntax.Stmt {
	s.RHS = r.expr(s.RHS, depth+1)
	s.LHS = r.target(s.LHS, depth+1)
	var code int
	switch s.Op {
	case syntax.PLUS_EQ:
		if id, ok := s.LHS.(*syntax.Ident); ok && r.ints[id.Name] && r.isInt(s.RHS) {
			return s
		}
		s.RHS = call(nameGrow, s.OpPos, s.RHS)
		return s
	case syntax.STAR_EQ:
		code = 0
		if id, ok := s.LHS.(*syntax.Ident); ok && r.ints[id.Name] && r.smallInt(s.RHS) {
			return s
		}
	case syntax.MINUS_EQ, syntax.SLASH_EQ, syntax.SLASHSLASH_EQ:
		if id, ok := s.LHS.(*syntax.Ident); ok && r.ints[id.Name] && r.isInt(s.RHS) {
			return s
		}
		code = map[syntax.Token]int{syntax.MINUS_EQ: 5, syntax.SLASH_EQ: 6, syntax.SLASHSLASH_EQ: 7}[s.Op]
	case syntax.PERCENT_EQ:
		code = 1
	case syntax.LTLT_EQ:
		code = 2
	case syntax.AMP_EQ, syntax.CIRCUMFLEX_EQ:
		if id, ok := s.LHS.(*syntax.Ident); ok && r.ints[id.Name] && r.isInt(s.RHS) {
			return s
		}
		code = 3
		if s.Op == syntax.CIRCUMFLEX_EQ {
			code = 4
		}
	case syntax.PIPE_EQ:
		// Upstream updates a dict in place; the operand is charged, and
		// for a name, the set it copies too.
		if id, ok := s.LHS.(*syntax.Ident); ok {
			if r.ints[id.Name] && r.isInt(s.RHS) {
				return s
			}
			s.RHS = call(nameGrowOr, s.OpPos, &syntax.Ident{NamePos: id.NamePos, Name: id.Name}, s.RHS)
		} else {
			s.RHS = call(nameGrowOr, s.OpPos, &syntax.Ident{NamePos: s.OpPos, Name: "None"}, s.RHS)
		}
		return s
	default:
		return s
	}
	op := []string{nameMul, nameMod, nameLsh, nameAnd, nameXor, nameSub, nameDiv, nameFloorDiv}[code]
	switch lhs := s.LHS.(type) {
	case *syntax.Ident:
		// x op= y is x = x op y for these operators (none is in place).
		read := &syntax.Ident{NamePos: lhs.NamePos, Name: lhs.Name}
		return &syntax.AssignStmt{OpPos: s.OpPos, Op: syntax.EQ, LHS: lhs, RHS: call(op, s.OpPos, read, s.RHS)}
	case *syntax.IndexExpr:
		return &syntax.ExprStmt{X: call(nameAugIndex, s.OpPos, intLit(code, s.OpPos), lhs.X, lhs.Y, s.RHS)}
	case *syntax.DotExpr:
		return &syntax.ExprStmt{X: call(nameAugAttr, s.OpPos, intLit(code, s.OpPos), lhs.X, strLit(lhs.Name.Name, lhs.NamePos), s.RHS)}
	}
	return s
}

// target rewrites the expressions inside an assignment target, leaving the
// stores themselves (names, x[i], x.f) in place.
func (r *rewriter) target(e syntax.Expr, depth int) syntax.Expr {
	if r.deep(depth, e) {
		return e
	}
	switch e := e.(type) {
	case *syntax.IndexExpr:
		e.X = r.expr(e.X, depth+1)
		e.Y = r.key(r.expr(e.Y, depth+1))
	case *syntax.DotExpr:
		e.X = r.expr(e.X, depth+1)
	case *syntax.TupleExpr:
		for i, x := range e.List {
			e.List[i] = r.target(x, depth+1)
		}
	case *syntax.ListExpr:
		for i, x := range e.List {
			e.List[i] = r.target(x, depth+1)
		}
	case *syntax.ParenExpr:
		e.X = r.target(e.X, depth+1)
	}
	return e
}

// params rewrites default values (name=expr) of parameters.
func (r *rewriter) params(list []syntax.Expr, depth int) {
	for _, p := range list {
		if b, ok := p.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			b.Y = r.expr(b.Y, depth+1)
		}
	}
}

func (r *rewriter) exprs(list []syntax.Expr, depth int) {
	for i, x := range list {
		list[i] = r.expr(x, depth)
	}
}

func (r *rewriter) expr(e syntax.Expr, depth int) syntax.Expr {
	if e == nil || r.deep(depth, e) {
		return e
	}
	depth++
	switch e := e.(type) {
	case *syntax.BinaryExpr:
		e.X = r.expr(e.X, depth)
		e.Y = r.expr(e.Y, depth)
		switch e.Op {
		case syntax.PLUS:
			if r.isInt(e.X) && r.isInt(e.Y) {
				return e
			}
			return call(nameAdd, e.OpPos, e.X, e.Y)
		case syntax.STAR:
			if (r.isInt(e.X) && r.smallInt(e.Y)) || (r.smallInt(e.X) && r.isInt(e.Y)) {
				return e
			}
			return call(nameMul, e.OpPos, e.X, e.Y)
		case syntax.PERCENT:
			if r.isInt(e.X) {
				return e
			}
			return call(nameMod, e.OpPos, e.X, e.Y)
		case syntax.MINUS, syntax.SLASH, syntax.SLASHSLASH:
			// Durations overflow, and a set difference copies.
			if r.isInt(e.X) && r.isInt(e.Y) {
				return e
			}
			return call(map[syntax.Token]string{syntax.MINUS: nameSub, syntax.SLASH: nameDiv, syntax.SLASHSLASH: nameFloorDiv}[e.Op], e.OpPos, e.X, e.Y)
		case syntax.LTLT:
			return call(nameLsh, e.OpPos, e.X, e.Y)
		case syntax.PIPE, syntax.AMP, syntax.CIRCUMFLEX:
			if r.isInt(e.X) && r.isInt(e.Y) {
				return e
			}
			return call(map[syntax.Token]string{syntax.PIPE: nameOr, syntax.AMP: nameAnd, syntax.CIRCUMFLEX: nameXor}[e.Op], e.OpPos, e.X, e.Y)
		}
		// A membership test scans its right operand, whatever its left
		// one is; other comparisons with a scalar cost at most a string's
		// length.
		if code := cmpCode(e.Op); code >= 0 && !r.scalar(e.Y) && (!r.scalar(e.X) || e.Op == syntax.IN || e.Op == syntax.NOT_IN) {
			return call(nameCmp, e.OpPos, intLit(code, e.OpPos), e.X, e.Y)
		}
	case *syntax.UnaryExpr:
		e.X = r.expr(e.X, depth)
	case *syntax.ParenExpr:
		e.X = r.expr(e.X, depth)
	case *syntax.CallExpr:
		e.Fn = r.expr(e.Fn, depth)
		for i, a := range e.Args {
			if b, ok := a.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
				b.Y = r.expr(b.Y, depth) // name=value
				continue
			}
			if u, ok := a.(*syntax.UnaryExpr); ok && (u.Op == syntax.STAR || u.Op == syntax.STARSTAR) {
				// f(*x), f(**x): the spread copies x into the arguments.
				u.X = call(nameSpread, u.OpPos, r.expr(u.X, depth))
				continue
			}
			e.Args[i] = r.expr(a, depth)
		}
	case *syntax.DotExpr:
		e.X = r.expr(e.X, depth)
		if wrappedMethods[e.Name.Name] {
			return call(nameAttr, e.Dot, e.X, strLit(e.Name.Name, e.NamePos))
		}
	case *syntax.IndexExpr:
		e.X = r.expr(e.X, depth)
		e.Y = r.key(r.expr(e.Y, depth))
	case *syntax.SliceExpr:
		args := []syntax.Expr{nil, r.expr(e.X, depth)}
		mask := 0
		for i, p := range []syntax.Expr{e.Lo, e.Hi, e.Step} {
			if p != nil {
				mask |= 1 << i
				args = append(args, r.expr(p, depth))
			}
		}
		args[0] = intLit(mask, e.Lbrack)
		return call(nameSlice, e.Lbrack, args...)
	case *syntax.Comprehension:
		e.Body = r.expr(e.Body, depth)
		for _, c := range e.Clauses {
			switch c := c.(type) {
			case *syntax.ForClause:
				c.Vars = r.target(c.Vars, depth)
				c.X = r.expr(c.X, depth)
			case *syntax.IfClause:
				c.Cond = r.expr(c.Cond, depth)
			}
		}
	case *syntax.DictExpr:
		for _, x := range e.List {
			entry := x.(*syntax.DictEntry)
			entry.Key = r.key(r.expr(entry.Key, depth))
			entry.Value = r.expr(entry.Value, depth)
		}
	case *syntax.DictEntry:
		e.Key = r.key(r.expr(e.Key, depth))
		e.Value = r.expr(e.Value, depth)
	case *syntax.LambdaExpr:
		r.params(e.Params, depth)
		e.Body = r.expr(e.Body, depth)
	case *syntax.ListExpr:
		r.exprs(e.List, depth)
	case *syntax.TupleExpr:
		r.exprs(e.List, depth)
	case *syntax.CondExpr:
		e.Cond = r.expr(e.Cond, depth)
		e.True = r.expr(e.True, depth)
		e.False = r.expr(e.False, depth)
	}
	return e
}

// key wraps an index or dict key that may be a tuple in $key, which
// bounds the cost of hashing it. Literals and known integers are left
// alone.
func (r *rewriter) key(e syntax.Expr) syntax.Expr {
	if r.scalar(e) {
		return e
	}
	return call(nameKey, syntax.Start(e), e)
}

func call(name string, pos syntax.Position, args ...syntax.Expr) *syntax.CallExpr {
	return &syntax.CallExpr{Fn: &syntax.Ident{NamePos: pos, Name: name}, Lparen: pos, Args: args, Rparen: pos}
}

func strLit(s string, pos syntax.Position) *syntax.Literal {
	return &syntax.Literal{Token: syntax.STRING, TokenPos: pos, Raw: fmt.Sprintf("%q", s), Value: s}
}

func intLit(n int, pos syntax.Position) *syntax.Literal {
	return &syntax.Literal{Token: syntax.INT, TokenPos: pos, Raw: fmt.Sprint(n), Value: int64(n)}
}

// isInt reports whether e certainly evaluates to an integer (or fails).
func (r *rewriter) isInt(e syntax.Expr) bool { return isIntExpr(e, r.ints, 0) }

// scalar reports whether e is a literal or certainly an integer: comparing
// anything with it costs at most the length of a string.
func (r *rewriter) scalar(e syntax.Expr) bool {
	if p, ok := e.(*syntax.ParenExpr); ok {
		return r.scalar(p.X)
	}
	if _, ok := e.(*syntax.Literal); ok {
		return true
	}
	return r.isInt(e)
}

// smallInt reports whether e is an integer literal of at most 16 bits: a
// product with it grows by at most 16 bits per step.
func (r *rewriter) smallInt(e syntax.Expr) bool {
	if p, ok := e.(*syntax.ParenExpr); ok {
		return r.smallInt(p.X)
	}
	lit, ok := e.(*syntax.Literal)
	if !ok || lit.Token != syntax.INT {
		return false
	}
	v, ok := lit.Value.(int64)
	return ok && v > -(1<<16) && v < 1<<16
}

func isIntExpr(e syntax.Expr, ints map[string]bool, depth int) bool {
	if depth > 64 {
		return false
	}
	switch e := e.(type) {
	case *syntax.Literal:
		return e.Token == syntax.INT
	case *syntax.Ident:
		return ints[e.Name]
	case *syntax.ParenExpr:
		return isIntExpr(e.X, ints, depth+1)
	case *syntax.UnaryExpr:
		return (e.Op == syntax.MINUS || e.Op == syntax.PLUS || e.Op == syntax.TILDE) && isIntExpr(e.X, ints, depth+1)
	case *syntax.BinaryExpr:
		switch e.Op {
		case syntax.PLUS, syntax.MINUS, syntax.STAR, syntax.SLASHSLASH, syntax.PERCENT,
			syntax.AMP, syntax.PIPE, syntax.CIRCUMFLEX, syntax.LTLT, syntax.GTGT:
			return isIntExpr(e.X, ints, depth+1) && isIntExpr(e.Y, ints, depth+1)
		}
	case *syntax.CondExpr:
		return isIntExpr(e.True, ints, depth+1) && isIntExpr(e.False, ints, depth+1)
	case *syntax.CallExpr:
		// len(...) returns an int unless len is rebound (then "len" is not
		// in ints' universe: intNames refuses files that bind it).
		if id, ok := e.Fn.(*syntax.Ident); ok && id.Name == "len" && ints[" len"] {
			return true
		}
	}
	return false
}

// intNames finds the names that are bound, anywhere in the file and in any
// scope, only to integers: by assignments whose right side is an integer
// expression, by augmented assignments of integers, and by for loops over
// range(...). Conflating scopes keeps the analysis conservative.
//
// A name the script also sees from outside (predeclared) is never an
// integer: some reads of it may resolve to the outside value. This must
// hold before the fixed point, or names assigned from it would be wrongly
// kept.
func intNames(f *syntax.File, predeclared func(string) bool) map[string]bool {
	type binding struct {
		name string
		rhs  syntax.Expr // nil: not an integer binding
		aug  bool
	}
	var binds []binding
	bound := map[string]bool{}
	var bindTarget func(e syntax.Expr)
	bindTarget = func(e syntax.Expr) {
		switch e := e.(type) {
		case *syntax.Ident:
			binds = append(binds, binding{name: e.Name})
			bound[e.Name] = true
		case *syntax.TupleExpr:
			for _, x := range e.List {
				bindTarget(x)
			}
		case *syntax.ListExpr:
			for _, x := range e.List {
				bindTarget(x)
			}
		case *syntax.ParenExpr:
			bindTarget(e.X)
		}
	}
	loopVar := func(vars, x syntax.Expr) {
		id, ok := vars.(*syntax.Ident)
		c, isCall := x.(*syntax.CallExpr)
		if ok && isCall {
			if fn, ok := c.Fn.(*syntax.Ident); ok && fn.Name == "range" {
				binds = append(binds, binding{name: id.Name, rhs: &syntax.Literal{Token: syntax.INT}})
				bound[id.Name] = true
				return
			}
		}
		bindTarget(vars)
	}
	params := func(ps []syntax.Expr) {
		for _, p := range ps {
			switch p := p.(type) {
			case *syntax.Ident:
				bindTarget(p)
			case *syntax.BinaryExpr:
				bindTarget(p.X)
			case *syntax.UnaryExpr:
				if p.X != nil {
					bindTarget(p.X)
				}
			}
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.AssignStmt:
			if id, ok := n.LHS.(*syntax.Ident); ok {
				switch n.Op {
				case syntax.EQ, syntax.PLUS_EQ, syntax.MINUS_EQ, syntax.STAR_EQ, syntax.SLASHSLASH_EQ,
					syntax.PERCENT_EQ, syntax.AMP_EQ, syntax.PIPE_EQ, syntax.CIRCUMFLEX_EQ, syntax.LTLT_EQ, syntax.GTGT_EQ:
					binds = append(binds, binding{name: id.Name, rhs: n.RHS, aug: n.Op != syntax.EQ})
					bound[id.Name] = true
				default:
					bindTarget(n.LHS)
				}
			} else if n.Op == syntax.EQ {
				bindTarget(n.LHS)
			}
		case *syntax.DefStmt:
			bindTarget(n.Name)
			params(n.Params)
		case *syntax.LambdaExpr:
			params(n.Params)
		case *syntax.LoadStmt:
			for _, id := range n.To {
				bindTarget(id)
			}
		case *syntax.ForStmt:
			loopVar(n.Vars, n.X)
		case *syntax.ForClause:
			loopVar(n.Vars, n.X)
		}
		return true
	})
	ints := map[string]bool{}
	if bound["range"] {
		// range itself is rebound: no loop variable is known to be an int.
		for i := range binds {
			if _, ok := binds[i].rhs.(*syntax.Literal); ok && binds[i].rhs.(*syntax.Literal).Raw == "" {
				binds[i].rhs = nil
			}
		}
	}
	for _, b := range binds {
		ints[b.name] = b.rhs != nil
	}
	for _, b := range binds {
		if b.rhs == nil || predeclared(b.name) {
			ints[b.name] = false
		}
	}
	if !bound["len"] {
		ints[" len"] = true
	}
	for changed := true; changed; {
		changed = false
		for _, b := range binds {
			if ints[b.name] && !isIntExpr(b.rhs, ints, 0) {
				ints[b.name] = false
				changed = true
			}
		}
	}
	return ints
}

// SMT-LIB v2 reader: tokenizer, s-expressions, and elaboration into the term table.
#include "parser.h"

#include <memory>
#include <optional>

namespace verifuse::shapes {
namespace {

constexpr int kMaxDepth = 20000;

struct SExpr {
  enum Kind { kList, kSymbol, kNumeral, kDecimal, kString, kKeyword } kind = kList;
  std::string_view text;
  int line = 0, col = 0;
  size_t begin = 0, end = 0;  // byte range in the source
  std::vector<SExpr> kids;
};

struct ParseError {
  int line, col;
  std::string msg;
};

class Reader {
 public:
  explicit Reader(std::string_view src) : src_(src) {}

  /// Next top-level s-expression, or nullopt at end of input. Errors are thrown as ParseError
  /// (caught in parseSmtLib; never leave this file).
  std::optional<SExpr> next() {
    skipSpace();
    if (pos_ >= src_.size()) return std::nullopt;
    return read(0);
  }

 private:
  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpace() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ';') {
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        advance();
      } else {
        break;
      }
    }
  }
  SExpr read(int depth) {
    if (depth > kMaxDepth) throw ParseError{line_, col_, "expressions nested too deeply"};
    SExpr e;
    e.line = line_;
    e.col = col_;
    e.begin = pos_;
    char c = src_[pos_];
    if (c == '(') {
      advance();
      e.kind = SExpr::kList;
      for (;;) {
        skipSpace();
        if (pos_ >= src_.size()) {
          throw ParseError{e.line, e.col, "unbalanced parentheses: '(' is never closed"};
        }
        if (src_[pos_] == ')') {
          advance();
          break;
        }
        e.kids.push_back(read(depth + 1));
      }
    } else if (c == ')') {
      throw ParseError{line_, col_, "unexpected ')'"};
    } else if (c == '|') {
      advance();
      size_t start = pos_;
      while (pos_ < src_.size() && src_[pos_] != '|') advance();
      if (pos_ >= src_.size()) throw ParseError{e.line, e.col, "unterminated quoted symbol"};
      e.kind = SExpr::kSymbol;
      e.text = src_.substr(start, pos_ - start);
      advance();
    } else if (c == '"') {
      advance();
      for (;;) {
        if (pos_ >= src_.size()) throw ParseError{e.line, e.col, "unterminated string literal"};
        if (src_[pos_] == '"') {
          advance();
          if (pos_ < src_.size() && src_[pos_] == '"') {
            advance();
            continue;
          }
          break;
        }
        advance();
      }
      e.kind = SExpr::kString;
      e.text = src_.substr(e.begin, pos_ - e.begin);
    } else {
      size_t start = pos_;
      while (pos_ < src_.size()) {
        char d = src_[pos_];
        if (d == '(' || d == ')' || d == ';' || d == '"' || d == '|' || d == ' ' || d == '\t' ||
            d == '\n' || d == '\r' || d == '\f' || d == '\v') {
          break;
        }
        advance();
      }
      e.text = src_.substr(start, pos_ - start);
      e.kind = classify(e.text);
    }
    e.end = pos_;
    return e;
  }
  static SExpr::Kind classify(std::string_view t) {
    if (t[0] == ':') return SExpr::kKeyword;
    bool digits = true, dot = false;
    // Z3 (and the corpus) accept negative literals such as -1.
    size_t start = (t.size() > 1 && t[0] == '-') ? 1 : 0;
    for (size_t i = start; i < t.size(); ++i) {
      if (t[i] == '.' && !dot && i > start && i + 1 < t.size()) {
        dot = true;
      } else if (t[i] < '0' || t[i] > '9') {
        digits = false;
        break;
      }
    }
    if (digits) return dot ? SExpr::kDecimal : SExpr::kNumeral;
    return SExpr::kSymbol;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

ParseError errAt(const SExpr& e, std::string msg) { return ParseError{e.line, e.col, std::move(msg)}; }

std::string show(const SExpr& e) {
  if (e.kind != SExpr::kList) return std::string(e.text);
  return "(...)";
}

Rat parseNumeral(const SExpr& e) {
  i128 v = 0;
  bool neg = !e.text.empty() && e.text[0] == '-';
  std::string_view digits = neg ? e.text.substr(1) : e.text;
  try {
    if (e.kind == SExpr::kNumeral) {
      for (char c : digits) v = checkedAdd(checkedMul(v, 10), c - '0');
      return Rat(neg ? -v : v);
    }
    i128 den = 1;
    bool frac = false;
    for (char c : digits) {
      if (c == '.') {
        frac = true;
        continue;
      }
      v = checkedAdd(checkedMul(v, 10), c - '0');
      if (frac) den = checkedMul(den, 10);
    }
    return Rat(neg ? -v : v, den);
  } catch (const ArithOverflow&) {
    throw errAt(e, "numeral out of range: " + std::string(e.text));
  }
}

struct Macro {
  std::vector<std::pair<std::string, Sort>> params;
  Sort result;
  std::shared_ptr<SExpr> body;
};

class Elaborator {
 public:
  explicit Elaborator(std::string_view src) : src_(src) {}

  ParsedProgram run() {
    Reader reader(src_);
    while (auto cmd = reader.next()) command(*cmd);
    for (auto& [name, _] : prog_.hints) (void)name;
    return std::move(prog_);
  }

 private:
  TermTable& T() { return prog_.terms; }

  Sort parseSort(const SExpr& e) {
    if (e.kind == SExpr::kSymbol) {
      if (e.text == "Int") return Sort::kInt;
      if (e.text == "Real") return Sort::kReal;
      if (e.text == "Bool") return Sort::kBool;
    }
    throw errAt(e, "unsupported sort '" + show(e) + "' (shape programs use Int, Real and Bool)");
  }

  std::string symbolOf(const SExpr& e, const char* what) {
    if (e.kind != SExpr::kSymbol) throw errAt(e, std::string("expected ") + what + ", got '" + show(e) + "'");
    return std::string(e.text);
  }

  void declare(const SExpr& at, const std::string& name, Sort s) {
    if (globals_.count(name)) throw errAt(at, "symbol '" + name + "' is already declared");
    globals_[name] = T().mkVar(name, s);
  }

  void command(const SExpr& c) {
    if (c.kind != SExpr::kList || c.kids.empty() || c.kids[0].kind != SExpr::kSymbol) {
      throw errAt(c, "expected a command like (assert ...), got '" + show(c) + "'");
    }
    std::string_view head = c.kids[0].text;
    auto need = [&](size_t n) {
      if (c.kids.size() != n) {
        throw errAt(c, "'" + std::string(head) + "' expects " + std::to_string(n - 1) + " argument(s), got " +
                           std::to_string(c.kids.size() - 1));
      }
    };
    if (head == "declare-const") {
      need(3);
      declare(c.kids[1], symbolOf(c.kids[1], "a symbol"), parseSort(c.kids[2]));
    } else if (head == "declare-fun") {
      need(4);
      if (c.kids[2].kind != SExpr::kList) throw errAt(c.kids[2], "expected an argument sort list");
      if (!c.kids[2].kids.empty()) {
        throw errAt(c, "uninterpreted functions with arguments are not supported in shape programs");
      }
      declare(c.kids[1], symbolOf(c.kids[1], "a symbol"), parseSort(c.kids[3]));
    } else if (head == "define-fun") {
      need(5);
      std::string name = symbolOf(c.kids[1], "a function name");
      // Like z3, a constant and a function may share a name (the corpus defines `ceil () Int`
      // next to the prelude's `ceil ((x Real)) Int`): they differ in arity.
      if (c.kids[2].kind == SExpr::kList && (c.kids[2].kids.empty() ? globals_.count(name) : macros_.count(name))) {
        throw errAt(c.kids[1], "symbol '" + name + "' is already declared");
      }
      const SExpr& params = c.kids[2];
      if (params.kind != SExpr::kList) throw errAt(params, "expected a parameter list");
      Sort result = parseSort(c.kids[3]);
      if (params.kids.empty()) {
        TermId t = coerce(elab(c.kids[4], 0), result, c.kids[4]);
        globals_[name] = t;
        definitions_[name] = std::string(src_.substr(c.kids[4].begin, c.kids[4].end - c.kids[4].begin));
      } else {
        Macro m;
        m.result = result;
        for (const SExpr& p : params.kids) {
          if (p.kind != SExpr::kList || p.kids.size() != 2) throw errAt(p, "expected (name Sort)");
          m.params.push_back({symbolOf(p.kids[0], "a parameter name"), parseSort(p.kids[1])});
        }
        m.body = std::make_shared<SExpr>(c.kids[4]);
        // Type-check the body once, now, so errors point at the definition.
        std::vector<std::pair<std::string, TermId>> scope;
        for (auto& [pn, ps] : m.params) scope.push_back({pn, T().mkVar("__param_" + pn, ps, /*internal=*/true)});
        scopes_.swap(scope);
        TermId body = elab(*m.body, 0);
        scopes_.swap(scope);
        (void)coerce(body, result, *m.body);
        // The probe variables stay in the table but are never referenced by asserts.
        probe_vars_ += m.params.size();
        macros_[name] = std::move(m);
      }
    } else if (head == "assert") {
      need(2);
      TermId t = elab(c.kids[1], 0);
      if (T().sort(t) != Sort::kBool) throw errAt(c.kids[1], "assert expects a Bool term");
      AssertInfo a;
      a.term = t;
      a.line = c.line;
      a.column = c.col;
      a.text = std::string(src_.substr(c.begin, c.end - c.begin));
      if (c.kids[1].kind == SExpr::kSymbol) {
        auto it = definitions_.find(std::string(c.kids[1].text));
        if (it != definitions_.end()) a.definition = it->second;
      }
      prog_.asserts.push_back(std::move(a));
    } else if (head == "set-info") {
      if (c.kids.size() >= 3 && c.kids[1].kind == SExpr::kKeyword && c.kids[1].text.substr(0, 9) == ":example-") {
        std::string name(c.kids[1].text.substr(9));
        const SExpr& v = c.kids[2];
        std::optional<Rat> val;
        if (v.kind == SExpr::kNumeral || v.kind == SExpr::kDecimal) {
          val = parseNumeral(v);
        } else if (v.kind == SExpr::kList && v.kids.size() == 2 && v.kids[0].text == "-" &&
                   (v.kids[1].kind == SExpr::kNumeral || v.kids[1].kind == SExpr::kDecimal)) {
          val = -parseNumeral(v.kids[1]);
        }
        if (val) prog_.hints[name] = *val;
      }
    } else if (head == "check-sat") {
      ++prog_.check_sats;
    } else if (head == "set-option" || head == "set-logic" || head == "get-value" || head == "get-model" ||
               head == "exit" || head == "get-info" || head == "get-assertions") {
      // Tolerated: they do not change the problem.
    } else if (head == "push" || head == "pop" || head == "reset" || head == "check-sat-assuming") {
      throw errAt(c, "'" + std::string(head) + "' is not supported (shape programs are one flat problem)");
    } else {
      throw errAt(c.kids[0], "unknown command '" + std::string(head) + "'");
    }
  }

  TermId coerce(TermId t, Sort want, const SExpr& at) {
    Sort s = T().sort(t);
    if (s == want) return t;
    if (s == Sort::kInt && want == Sort::kReal) return T().mk(Op::kToReal, Sort::kReal, {t});
    throw errAt(at, std::string("sort mismatch: expected ") + sortName(want) + ", got " + sortName(s));
  }

  /// Brings arithmetic arguments to a common sort (Int promoted to Real when mixed).
  Sort unifyArith(std::vector<TermId>& args, const SExpr& e, bool force_real = false) {
    bool real = force_real;
    for (size_t i = 0; i < args.size(); ++i) {
      Sort s = T().sort(args[i]);
      if (s == Sort::kBool) throw errAt(e.kids[i + 1], "expected an Int or Real term, got a Bool");
      if (s == Sort::kReal) real = true;
    }
    if (real) {
      for (size_t i = 0; i < args.size(); ++i) args[i] = coerce(args[i], Sort::kReal, e.kids[i + 1]);
    }
    return real ? Sort::kReal : Sort::kInt;
  }

  TermId lookup(const SExpr& e) {
    std::string name(e.text);
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (it->first == name) return it->second;
    }
    if (name == "true") return T().mkBool(true);
    if (name == "false") return T().mkBool(false);
    auto g = globals_.find(name);
    if (g != globals_.end()) return g->second;
    if (macros_.count(name)) throw errAt(e, "function '" + name + "' needs arguments");
    throw errAt(e, "unknown symbol '" + name + "'");
  }

  TermId elab(const SExpr& e, int depth) {
    if (depth > kMaxDepth) throw errAt(e, "term nested too deeply");
    switch (e.kind) {
      case SExpr::kNumeral: return T().mkConst(parseNumeral(e), Sort::kInt);
      case SExpr::kDecimal: return T().mkConst(parseNumeral(e), Sort::kReal);
      case SExpr::kSymbol: return lookup(e);
      case SExpr::kString: throw errAt(e, "string literals are not supported");
      case SExpr::kKeyword: throw errAt(e, "unexpected keyword '" + std::string(e.text) + "'");
      case SExpr::kList: break;
    }
    if (e.kids.empty()) throw errAt(e, "empty application '()'");
    const SExpr& h = e.kids[0];
    if (h.kind != SExpr::kSymbol) throw errAt(h, "expected a function symbol");
    std::string_view f = h.text;
    if (f == "let") return elabLet(e, depth);
    if (f == "!") {
      if (e.kids.size() < 2) throw errAt(e, "'!' needs a term");
      return elab(e.kids[1], depth + 1);
    }
    std::vector<TermId> args;
    args.reserve(e.kids.size() - 1);
    for (size_t i = 1; i < e.kids.size(); ++i) args.push_back(elab(e.kids[i], depth + 1));
    auto arity = [&](size_t lo, size_t hi) {
      size_t n = args.size();
      if (n < lo || n > hi) {
        throw errAt(e, "'" + std::string(f) + "' got " + std::to_string(n) + " argument(s)");
      }
    };
    auto needBool = [&]() {
      for (size_t i = 0; i < args.size(); ++i) {
        if (T().sort(args[i]) != Sort::kBool) throw errAt(e.kids[i + 1], "expected a Bool term");
      }
    };
    auto needInt = [&]() {
      for (size_t i = 0; i < args.size(); ++i) {
        if (T().sort(args[i]) != Sort::kInt) throw errAt(e.kids[i + 1], "expected an Int term");
      }
    };
    if (f == "+" || f == "*") {
      arity(1, SIZE_MAX);
      Sort s = unifyArith(args, e);
      if (args.size() == 1) return args[0];
      return T().mk(f == "+" ? Op::kAdd : Op::kMul, s, args);
    }
    if (f == "-") {
      arity(1, SIZE_MAX);
      Sort s = unifyArith(args, e);
      TermId minus1 = T().mkConst(Rat(-1), s);
      if (args.size() == 1) return T().mk(Op::kMul, s, {minus1, args[0]});
      std::vector<TermId> sum{args[0]};
      for (size_t i = 1; i < args.size(); ++i) sum.push_back(T().mk(Op::kMul, s, {minus1, args[i]}));
      return T().mk(Op::kAdd, s, sum);
    }
    if (f == "/") {
      arity(2, SIZE_MAX);
      unifyArith(args, e, /*force_real=*/true);
      TermId acc = args[0];
      for (size_t i = 1; i < args.size(); ++i) acc = T().mk(Op::kRDiv, Sort::kReal, {acc, args[i]});
      return acc;
    }
    if (f == "div" || f == "mod") {
      arity(2, f == "div" ? SIZE_MAX : 2);
      needInt();
      TermId acc = args[0];
      for (size_t i = 1; i < args.size(); ++i) {
        acc = T().mk(f == "div" ? Op::kDiv : Op::kMod, Sort::kInt, {acc, args[i]});
      }
      return acc;
    }
    if (f == "abs") {
      arity(1, 1);
      Sort s = unifyArith(args, e);
      return T().mk(Op::kAbs, s, args);
    }
    if (f == "to_real") {
      arity(1, 1);
      needInt();
      return T().mk(Op::kToReal, Sort::kReal, args);
    }
    if (f == "to_int") {
      arity(1, 1);
      unifyArith(args, e, true);
      return T().mk(Op::kToInt, Sort::kInt, args);
    }
    if (f == "^") {
      arity(2, 2);
      unifyArith(args, e, true);
      return T().mk(Op::kPow, Sort::kReal, args);
    }
    if (f == "ite") {
      arity(3, 3);
      if (T().sort(args[0]) != Sort::kBool) throw errAt(e.kids[1], "ite condition must be Bool");
      Sort a = T().sort(args[1]), b = T().sort(args[2]);
      Sort s = a;
      if (a != b) {
        if (a == Sort::kBool || b == Sort::kBool) throw errAt(e, "ite branches have different sorts");
        s = Sort::kReal;
        args[1] = coerce(args[1], s, e.kids[2]);
        args[2] = coerce(args[2], s, e.kids[3]);
      }
      return T().mk(Op::kIte, s, args);
    }
    if (f == "not") {
      arity(1, 1);
      needBool();
      return T().mk(Op::kNot, Sort::kBool, args);
    }
    if (f == "and" || f == "or") {
      needBool();
      if (args.empty()) return T().mkBool(f == "and");
      if (args.size() == 1) return args[0];
      return T().mk(f == "and" ? Op::kAnd : Op::kOr, Sort::kBool, args);
    }
    if (f == "=>") {
      arity(2, SIZE_MAX);
      needBool();
      // right associative: a => (b => c)
      TermId acc = args.back();
      for (size_t i = args.size() - 1; i-- > 0;) {
        acc = T().mk(Op::kOr, Sort::kBool, {T().mk(Op::kNot, Sort::kBool, {args[i]}), acc});
      }
      return acc;
    }
    if (f == "xor") {
      arity(2, 2);
      needBool();
      return T().mk(Op::kNot, Sort::kBool, {T().mk(Op::kEq, Sort::kBool, args)});
    }
    if (f == "=" || f == "distinct" || f == "<" || f == "<=" || f == ">" || f == ">=") {
      arity(2, SIZE_MAX);
      bool boolArgs = T().sort(args[0]) == Sort::kBool;
      if (boolArgs) {
        if (f != "=" && f != "distinct") throw errAt(e, "'" + std::string(f) + "' needs arithmetic terms");
        needBool();
      } else {
        unifyArith(args, e);
      }
      std::vector<TermId> conj;
      if (f == "distinct") {
        for (size_t i = 0; i < args.size(); ++i) {
          for (size_t j = i + 1; j < args.size(); ++j) {
            conj.push_back(T().mk(Op::kNot, Sort::kBool, {T().mk(Op::kEq, Sort::kBool, {args[i], args[j]})}));
          }
        }
      } else {
        for (size_t i = 0; i + 1 < args.size(); ++i) {
          TermId a = args[i], b = args[i + 1];
          if (f == "=") conj.push_back(T().mk(Op::kEq, Sort::kBool, {a, b}));
          if (f == "<") conj.push_back(T().mk(Op::kLt, Sort::kBool, {a, b}));
          if (f == "<=") conj.push_back(T().mk(Op::kLe, Sort::kBool, {a, b}));
          if (f == ">") conj.push_back(T().mk(Op::kLt, Sort::kBool, {b, a}));
          if (f == ">=") conj.push_back(T().mk(Op::kLe, Sort::kBool, {b, a}));
        }
      }
      if (conj.size() == 1) return conj[0];
      return T().mk(Op::kAnd, Sort::kBool, conj);
    }
    // User-defined function (prelude: ceil, min2, max2, sqrt).
    auto m = macros_.find(std::string(f));
    if (m != macros_.end()) {
      const Macro& mac = m->second;
      if (args.size() != mac.params.size()) {
        throw errAt(e, "'" + std::string(f) + "' expects " + std::to_string(mac.params.size()) + " argument(s), got " +
                           std::to_string(args.size()));
      }
      std::vector<std::pair<std::string, TermId>> scope;
      for (size_t i = 0; i < args.size(); ++i) {
        scope.push_back({mac.params[i].first, coerce(args[i], mac.params[i].second, e.kids[i + 1])});
      }
      scopes_.swap(scope);
      TermId body;
      try {
        body = elab(*mac.body, depth + 1);
      } catch (...) {
        scopes_.swap(scope);
        throw;
      }
      scopes_.swap(scope);
      return coerce(body, mac.result, e);
    }
    if (globals_.count(std::string(f))) throw errAt(h, "'" + std::string(f) + "' is a constant, not a function");
    throw errAt(h, "unknown function '" + std::string(f) + "'");
  }

  TermId elabLet(const SExpr& e, int depth) {
    if (e.kids.size() != 3 || e.kids[1].kind != SExpr::kList) throw errAt(e, "malformed let");
    std::vector<std::pair<std::string, TermId>> bound;
    for (const SExpr& b : e.kids[1].kids) {
      if (b.kind != SExpr::kList || b.kids.size() != 2) throw errAt(b, "expected (name term) in let");
      bound.push_back({symbolOf(b.kids[0], "a let variable"), elab(b.kids[1], depth + 1)});
    }
    size_t mark = scopes_.size();
    for (auto& p : bound) scopes_.push_back(p);
    TermId body = elab(e.kids[2], depth + 1);
    scopes_.resize(mark);
    return body;
  }

  std::string_view src_;
  ParsedProgram prog_;
  std::unordered_map<std::string, TermId> globals_;
  std::unordered_map<std::string, Macro> macros_;
  std::unordered_map<std::string, std::string> definitions_;
  std::vector<std::pair<std::string, TermId>> scopes_;
  size_t probe_vars_ = 0;
};

}  // namespace

StatusOr<ParsedProgram> parseSmtLib(std::string_view text) {
  try {
    Elaborator el(text);
    return el.run();
  } catch (const ParseError& e) {
    return invalidArgument("line " + std::to_string(e.line) + ", column " + std::to_string(e.col) + ": " + e.msg);
  } catch (const ArithOverflow&) {
    return invalidArgument("numeric overflow while reading the program");
  } catch (const std::bad_alloc&) {
    return internalError("out of memory while reading the program");
  }
}

}  // namespace verifuse::shapes

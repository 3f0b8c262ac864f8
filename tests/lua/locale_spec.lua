-- Specs for crier.locale and the locale-aware template filters: tags and
-- their fallback chains, CLDR plural categories (English, German, Polish,
-- Russian, Czech, French, Arabic, Japanese), the plural filter's named forms
-- and its load-time checks, date styles and names and money per locale.
local locale = require "crier.locale"
local template = require "crier.template"

local function render(source, ctx)
    local fn = assert(template.compile(source, { name = "t" }))
    local out, err = fn(ctx)
    assert(out, err)
    return out
end

local function compile_error(source)
    local fn, err = template.compile(source, { name = "t" })
    assert.is_nil(fn)
    return err
end

describe("crier.locale tags", function()
    it("normalises case and separators", function()
        assert.are.equal("de-AT", locale.normalize("de-at"))
        assert.are.equal("de-AT", locale.normalize("DE_AT"))
        assert.are.equal("zh-Hant-TW", locale.normalize("zh-hant-tw"))
        assert.are.equal("pl", locale.normalize("PL"))
    end)

    it("refuses what is not a tag, saying what a tag looks like", function()
        for _, bad in ipairs({ "", "d", "deutsch", "de-", "-de", "de--AT", "de AT", "de-toolongsubtag", 12 }) do
            local t, err = locale.normalize(bad)
            assert.is_nil(t, tostring(bad))
            assert.matches("like \"de\"", err)
        end
    end)

    it("agrees with crier.set_recipient_settings on tests/vectors/locale_tags.tsv", function()
        local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
        local f = assert(io.open(here .. "/../vectors/locale_tags.tsv", "rb"))
        local rows, header = 0, nil
        for line in f:lines() do
            if line:sub(1, 1) ~= "#" then
                if not header then
                    header = line
                    assert.are.equal("tag\tstored\tcanonical", header)
                else
                    local tag, stored, canonical = line:match("^([^\t]*)\t([tf])\t([^\t]+)$")
                    assert(tag, "locale_tags.tsv: a line is not tag<TAB>t|f<TAB>canonical: " .. line)
                    rows = rows + 1
                    local got = locale.normalize(tag)
                    assert.are.equal(canonical ~= "\\N" and canonical or nil, got, tag)
                    if stored == "t" then
                        assert.is_string(got, "SQL stores " .. tag .. " but Lua refuses it")
                    end
                end
            end
        end
        f:close()
        assert.is_true(rows >= 25, "rows: " .. rows)
    end)

    it("falls back from the most specific tag to the language", function()
        assert.are.same({ "de-at", "de" }, locale.chain("de-AT"))
        assert.are.same({ "zh-hant-tw", "zh-hant", "zh" }, locale.chain("zh-Hant-TW"))
        assert.are.same({}, locale.chain("not a tag"))
    end)
end)

describe("crier.locale plural categories", function()
    local function categories(tag, counts)
        local out = {}
        for i, n in ipairs(counts) do
            out[i] = locale.plural_category(tag, n)
        end
        return out
    end
    local counts = { 1, 2, 5, 12, 22, 25, 0, 1.5, "1.0", 101, 111 }

    it("English and German: one for exactly 1, other otherwise (1.0 is other)", function()
        local want = { "one", "other", "other", "other", "other", "other", "other", "other", "other", "other",
            "other" }
        assert.are.same(want, categories("en", counts))
        assert.are.same(want, categories("de", counts))
        assert.are.same(want, categories("de-AT", counts))
        assert.are.same(want, categories(nil, counts)) -- no locale: English rules
    end)

    it("Polish: one, few (2-4 but not 12-14), many, other for fractions", function()
        assert.are.same({ "one", "few", "many", "many", "few", "many", "many", "other", "other", "many", "many" },
            categories("pl", counts))
        assert.are.equal("few", locale.plural_category("pl", 104))
        assert.are.equal("many", locale.plural_category("pl", 114))
    end)

    it("Russian and Czech", function()
        assert.are.same({ "one", "few", "many", "many", "few", "many", "many", "other", "other", "one", "many" },
            categories("ru", counts))
        assert.are.same({ "one", "few", "other", "other", "other", "other", "other", "many", "many", "other",
            "other" }, categories("cs", counts))
    end)

    it("French: one for 0 and 1 (and 1.5), many for millions", function()
        assert.are.same({ "one", "other", "other" }, categories("fr", { 0, 2, 5 }))
        assert.are.equal("one", locale.plural_category("fr", 1.5))
        assert.are.equal("many", locale.plural_category("fr", 1000000))
        assert.are.equal("other", locale.plural_category("fr", 1000001))
    end)

    it("Arabic: six categories", function()
        assert.are.same({ "zero", "one", "two", "few", "few", "many", "many", "other", "other" },
            categories("ar", { 0, 1, 2, 3, 110, 11, 99, 100, 2.5 }))
    end)

    it("Japanese, Chinese and Korean: other only; unknown languages too", function()
        for _, tag in ipairs({ "ja", "zh", "ko", "xx" }) do
            assert.are.same({ "other", "other", "other", "other" }, categories(tag, { 0, 1, 2, 1.5 }))
        end
    end)

    it("answers the same after more distinct tags than it caches", function()
        for i = 1, 1000 do
            assert.are.equal("few", locale.plural_category("pl-" .. i, 3))
            assert.are.equal("Jänner", locale.formats("de-AT-" .. i).months[1])
        end
        assert.are.equal("other", locale.plural_category("n", 1)) -- not a tag: no rules
    end)

    it("is nil for what is not a count", function()
        assert.is_nil(locale.plural_category("en", "many"))
        assert.is_nil(locale.plural_category("en", 0 / 0))
        assert.is_nil(locale.plural_category("en", {}))
    end)
end)

describe("the plural filter", function()
    local polish = "{{ n | plural(one='# komentarz', few='# komentarze', many='# komentarzy', other='# komentarza') }}"

    it("picks the Polish forms by category, writing the count the Polish way", function()
        local want = { [1] = "1 komentarz", [2] = "2 komentarze", [5] = "5 komentarzy", [12] = "12 komentarzy",
            [22] = "22 komentarze", [25] = "25 komentarzy", [0] = "0 komentarzy" }
        for n, text in pairs(want) do
            assert.are.equal(text, render(polish, { n = n, locale = "pl" }))
        end
        assert.are.equal("1,5 komentarza", render(polish, { n = 1.5, locale = "pl" }))
        assert.are.equal("12 345 komentarzy", render(polish, { n = 12345, locale = "pl" }))
    end)

    it("English and German forms; a missing category uses other", function()
        local en = "{{ n | plural(one='# comment', other='# comments') }}"
        assert.are.equal("1 comment", render(en, { n = 1 }))
        assert.are.equal("0 comments", render(en, { n = 0 }))
        assert.are.equal("1.5 comments", render(en, { n = 1.5 }))
        assert.are.equal("1,234 comments", render(en, { n = 1234, locale = "en" }))
        local de = "{{ n | plural(one='ein Kommentar', other='# Kommentare') }}"
        assert.are.equal("ein Kommentar", render(de, { n = 1, locale = "de-AT" }))
        assert.are.equal("22 Kommentare", render(de, { n = 22, locale = "de" }))
        assert.are.equal("1,5 Kommentare", render(de, { n = 1.5, locale = "de" }))
        -- Polish forms rendered with English rules: few and many are not
        -- English categories, one is
        assert.are.equal("2 komentarza", render(polish, { n = 2, locale = "en" }))
    end)

    it("Japanese: one form for every count", function()
        local ja = "{{ n | plural(other='#件のコメント') }}"
        for _, n in ipairs({ 0, 1, 2, 5 }) do
            assert.are.equal(n .. "件のコメント", render(ja, { n = n, locale = "ja" }))
        end
    end)

    it("takes forms from paths, and decimal strings as counts", function()
        assert.are.equal("items", render("{{ n | plural(one=a, other=b) }}", { n = "1.0", a = "item", b = "items" }))
        assert.are.equal("1 item", render("{{ n | plural(one='# item', other='# items') }}", { n = "1" }))
    end)

    it("refuses bad forms when the template compiles, with line and column", function()
        assert.are.equal("t:1: plural: the form for 'other' is missing (every language has it; a category without "
            .. "a form uses it), e.g. plural(one='# item', other='# items') (column 8)",
            compile_error("{{ n | plural(one='# item') }}"))
        assert.are.equal("t:2: filter 'plural' has no argument named 'several' (column 24); its named arguments: "
            .. "zero, one, two, few, many, other",
            compile_error("\n{{ n | plural(one='a', several='b', other='c') }}"))
        assert.matches("plural: the form for 'one' must be a string, got the number 1",
            compile_error("{{ n | plural(one=1, other='c') }}"), 1, true)
        assert.matches("argument 'one' of 'plural' is given twice",
            compile_error("{{ n | plural(one='a', one='b', other='c') }}"), 1, true)
        assert.matches("plural: give the forms by category, e.g. plural(one='# item', other='# items')",
            compile_error("{{ n | plural('a', 'b') }}"), 1, true)
        assert.matches("filter 'upper' has no argument named 'x' %(column 14%); it takes no named arguments",
            compile_error("{{ n | upper(x='y') }}"))
        -- a lone "=" elsewhere is still the comparison hint
        assert.matches("compare with == or !=", compile_error("{{ a = b }}"), 1, true)
        assert.are.equal("t:1: unexpected '=' (column 10); compare with == or !=",
            compile_error("{% if (a = b) %}x{% endif %}"))
    end)

    it("fails the render for a value that is not a count", function()
        local fn = assert(template.compile("{{ n | plural(other='x') }}", { name = "t" }))
        local out, err = fn({ n = "several" })
        assert.is_nil(out)
        assert.matches("plural: expected a number or a decimal string, got the string \"several\"", err, 1, true)
    end)
end)

describe("date and money per locale", function()
    local at = "2026-01-03T16:05:00Z" -- a Saturday

    it("writes the date styles of each locale", function()
        local src = "{{ d | date('short') }}|{{ d | date('medium') }}|{{ d | date('long') }}|{{ d | date('full') }}"
            .. "|{{ d | date('time') }}"
        local want = {
            en = "1/3/26|Jan 3, 2026|January 3, 2026|Saturday, January 3, 2026|4:05 PM",
            de = "03.01.26|03.01.2026|3. Januar 2026|Samstag, 3. Januar 2026|16:05",
            ["de-AT"] = "03.01.26|03.01.2026|3. Jänner 2026|Samstag, 3. Jänner 2026|16:05",
            fr = "03/01/2026|3 janv. 2026|3 janvier 2026|samedi 3 janvier 2026|16:05",
            es = "3/1/26|3 ene 2026|3 de enero de 2026|sábado, 3 de enero de 2026|16:05",
            pl = "3.01.2026|3 sty 2026|3 stycznia 2026|sobota, 3 stycznia 2026|16:05",
            ja = "2026/01/03|2026/01/03|2026年1月3日|2026年1月3日土曜日|16:05",
        }
        for tag, text in pairs(want) do
            assert.are.equal(text, render(src, { d = at, locale = tag }), tag)
        end
        -- no locale, or one without formats: English
        assert.are.equal(want.en, render(src, { d = at }))
        assert.are.equal(want.en, render(src, { d = at, locale = "sw" }))
    end)

    it("names months and weekdays in the locale's language in formats", function()
        assert.are.equal("Sa., 3. Jan. (Januar)", render("{{ d | date('%a, %e. %b (%B)') }}",
            { d = at, locale = "de" }):gsub("  ", " "))
        assert.are.equal("土曜日 1月", render("{{ d | date('%A %B') }}", { d = at, locale = "ja" }))
        assert.are.equal("Sat Jan 04 PM", render("{{ d | date('%a %b %I %p') }}", { d = at }))
        -- the default format stays ISO-8601 whatever the locale
        assert.are.equal("2026-01-03T16:05:00Z", render("{{ d | date }}", { d = at, locale = "de" }))
    end)

    it("writes money the locale's way", function()
        local src = "{{ a | money('EUR') }}|{{ a | money('USD') }}|{{ y | money('JPY') }}|{{ a | money('PLN') }}"
        local ctx = { a = 123450, y = 1235 }
        local want = {
            en = "€1,234.50|$1,234.50|¥1,235|PLN 1,234.50",
            de = "1.234,50 €|1.234,50 $|1.235 ¥|1.234,50 PLN",
            fr = "1 234,50 €|1 234,50 $US|1 235 ¥|1 234,50 PLN",
            es = "1234,50 €|1234,50 US$|1235 ¥|1234,50 PLN", -- es groups from 5 digits (CLDR)
            pl = "1234,50 €|1234,50 USD|1235 ¥|1234,50 zł",
            ja = "€1,234.50|$1,234.50|￥1,235|PLN 1,234.50",
        }
        for tag, text in pairs(want) do
            ctx.locale = tag
            assert.are.equal(text, render(src, ctx), tag)
        end
        assert.are.equal("-12 345 678,90 zł", render("{{ a | money('PLN') }}", { a = -1234567890, locale = "pl" }))
        assert.are.equal("-$0.05", render("{{ a | money('USD') }}", { a = -5, locale = "en-US" }))
    end)

    it("keeps the locale-free money format without a locale or with explicit separators", function()
        assert.are.equal("1234.50 EUR", render("{{ a | money('EUR') }}", { a = 123450 }))
        assert.are.equal("1234.50 EUR", render("{{ a | money('EUR') }}", { a = 123450, locale = "sw" }))
        assert.are.equal("1,234.50 EUR", render("{{ a | money('EUR', ',') }}", { a = 123450, locale = "de" }))
    end)
end)

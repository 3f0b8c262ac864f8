-- Specs for content per locale in rules: a channel block's locales = { ... }
-- with the fallback chain de-AT -> de -> the block's own fields (per field),
-- the rule's locale (the language of the default content), the locale
-- templates render in ({{ locale }}, plural, date, money), digests per
-- locale, crier.testing's locale option, and the load-time errors with
-- file:line.
local testing = require "crier.testing"
local json = require "crier.json"

local source = [=[
local crier = require "crier"
crier.event_type "invoice.due" {
    payload = { id = "string", cents = "integer", items = "integer", due = "string", people = "array" },
}
crier.rule "invoice.due" {
    locale = "en",
    recipients = function(event) return event.payload.people end,
    channels = { "email", "webhook", "feed", "kafka" },
    email = {
        from = "billing@example.com",
        subject = "Invoice {{ payload.id }} is due",
        text = "{{ payload.items | plural(one='# item', other='# items') }}: {{ payload.cents | money('EUR') }}, "
            .. "due {{ payload.due | date('long') }} ({{ locale }})",
        locales = {
            de = {
                subject = "Rechnung {{ payload.id }} ist fällig",
                text = "{{ payload.items | plural(one='# Posten', other='# Posten') }}: "
                    .. "{{ payload.cents | money('EUR') }}, fällig am {{ payload.due | date('long') }} ({{ locale }})",
            },
            ["de-AT"] = { subject = "Rechnung {{ payload.id }} ist zu zahlen" },
            pl = {
                subject = "Faktura {{ payload.id }}",
                text = "{{ payload.items | plural(one='# pozycja', few='# pozycje', many='# pozycji', "
                    .. "other='# pozycji') }}: {{ payload.cents | money('PLN') }}",
            },
            ja = { subject = "請求書 {{ payload.id }}", text = "{{ payload.items | plural(other='#点') }}" },
        },
    },
    webhook = {
        url = "https://hooks.test/x",
        body = [[{"text": "{{ payload.cents | money('EUR') }}"}]],
        locales = { de = { body = { text = "fest" } } },
    },
    feed = { title = "Invoice {{ payload.id }}", locales = { fr = { title = "Facture {{ payload.id }}" } } },
    kafka = {
        topic = "invoices",
        body = [[{"n": "{{ payload.items | plural(one='# item', other='# items') }}"}]],
        locales = { pl = { body = [[{"n": "{{ payload.items | plural(few='# pozycje', other='# pozycji') }}"}]] } },
    },
}
]=]

local rules = testing.load_source(source, { path = "/rules/billing.lua" })

local function event(people, items)
    return { type = "invoice.due", tenant = "acme", entity_id = "inv_7",
             payload = { id = "inv_7", cents = 123450, items = items or 3, due = "2026-01-05T10:00:00Z",
                         people = people } }
end

local function person(id, loc)
    return { id = id, email = id .. "@acme.test", locale = loc }
end

describe("content per locale", function()
    it("picks each recipient's locale along the chain de-AT -> de -> default, field by field", function()
        local result = rules:plan(event({ person("en", "en-GB"), person("at", "de-AT"), person("de", "de"),
            person("ch", "de-CH"), person("pl", "pl"), person("ja", "ja"), person("none"), person("odd", "!!") }))
        local function email(id)
            return testing.assert_delivered(result, id, "email")
        end
        assert.are.equal("Invoice inv_7 is due", email("en").subject)
        assert.are.equal("3 items: €1,234.50, due January 5, 2026 (en-GB)", email("en").text)
        -- de-AT: its own subject, the text from de, rendered in de-AT (Jänner)
        assert.are.equal("Rechnung inv_7 ist zu zahlen", email("at").subject)
        assert.are.equal("3 Posten: 1.234,50 €, fällig am 5. Jänner 2026 (de-AT)", email("at").text)
        assert.are.equal("Rechnung inv_7 ist fällig", email("de").subject)
        assert.are.equal("3 Posten: 1.234,50 €, fällig am 5. Januar 2026 (de)", email("de").text)
        -- de-CH has no block: de's, rendered as de-CH (German formats)
        assert.are.equal("Rechnung inv_7 ist fällig", email("ch").subject)
        assert.are.equal("3 pozycje: 1234,50 zł", email("pl").text)
        assert.are.equal("3点", email("ja").text)
        -- no locale, or one that is not a tag: the default, in the rule's locale
        assert.are.equal("Invoice inv_7 is due", email("none").subject)
        assert.are.equal("3 items: €1,234.50, due January 5, 2026 (en)", email("none").text)
        assert.are.equal("3 items: €1,234.50, due January 5, 2026 (en)", email("odd").text)
        -- other channels: their own locales, or the default
        assert.are.same({ text = "fest" }, testing.assert_delivered(result, "at", "webhook").body)
        -- pl has no webhook block: the default body, rendered in the rule's
        -- locale (the text is English)
        assert.are.same({ text = "€1,234.50" }, testing.assert_delivered(result, "pl", "webhook").body)
        assert.are.equal("Invoice inv_7", testing.assert_delivered(result, "de", "feed").content.title)
        assert.are.same({ n = "3 pozycje" }, testing.assert_delivered(result, "pl", "kafka").body)
        assert.are.same({ n = "3 items" }, testing.assert_delivered(result, "ja", "kafka").body)
        result = rules:plan(event({ person("fr", "fr-CA") }))
        assert.are.equal("Facture inv_7", testing.assert_delivered(result, "fr", "feed").content.title)
        assert.are.equal("Invoice inv_7 is due", testing.assert_delivered(result, "fr", "email").subject)
    end)

    it("uses Polish plural forms", function()
        for items, want in pairs({ [1] = "1 pozycja", [2] = "2 pozycje", [5] = "5 pozycji", [22] = "22 pozycje" }) do
            local result = rules:plan(event({ person("pl", "pl") }, items))
            assert.are.equal(want .. ": 1234,50 zł", testing.assert_delivered(result, "pl", "email").text)
        end
    end)

    it("renders for a locale given to plan (as crier try --locale)", function()
        local result = rules:plan(event({ person("x"), person("y", "ja") }), { locale = "de-AT" })
        assert.are.equal("Rechnung inv_7 ist zu zahlen", testing.assert_delivered(result, "x", "email").subject)
        assert.are.equal("Rechnung inv_7 ist zu zahlen", testing.assert_delivered(result, "y", "email").subject)
        assert.has_error(function()
            rules:plan(event({ person("x") }), { locale = "Deutsch" })
        end)
        -- and the next plan is back to the recipients' own
        result = rules:plan(event({ person("y", "ja") }))
        assert.are.equal("請求書 inv_7", testing.assert_delivered(result, "y", "email").subject)
    end)

    it("leaves rules without locales as they were, whatever the recipients' locale", function()
        local plain = testing.load_source([[
local crier = require "crier"
crier.event_type "x" { payload = { cents = "integer", n = "integer" } }
crier.rule "x" {
    recipients = function() return { { id = "a", locale = "de" } } end,
    channels = { "feed" },
    feed = { title = "{{ payload.cents | money('EUR') }} {{ payload.n | plural(one='# thing', other='# things') }}"
        .. "{{ locale | default('-') }}" },
}
]])
        local result = plain:plan { type = "x", tenant = "acme", entity_id = "1", payload = { cents = 150, n = 1 } }
        assert.are.equal("1.50 EUR 1 thing-", testing.assert_delivered(result, "a", "feed").content.title)
    end)

    it("renders a digest in the recipient's locale", function()
        local digest_rules = testing.load_source([[
local crier = require "crier"
crier.event_type "c" { payload = { n = "integer" } }
crier.rule "c" {
    recipients = { "a" }, channels = { "email" },
    email = {
        to = "a@acme.test", subject = "hi", text = "x",
        digest = { window = "1h", subject = "{{ digest.count | plural(one='# comment', other='# comments') }}" },
        locales = { pl = { digest = { subject = "{{ digest.count | plural(one='# komentarz', few='# komentarze',"
            .. " many='# komentarzy', other='# komentarza') }}" } } },
    },
}
]])
        local input = {
            tenant = "acme", event_type = "c", channel = "email", recipient = { id = "a", locale = "pl" },
            digest = { key = "k", window_start = "2026-01-05T09:00:00Z", window_end = "2026-01-05T10:00:00Z" },
            items = { { id = 1, type = "c", entity_id = "1", payload = { n = 1 } },
                      { id = 2, type = "c", entity_id = "2", payload = { n = 2 } } },
        }
        local plan = assert(digest_rules.generation:render_digest(json.encode(input)))
        assert.are.equal("2 komentarze", plan[1].deliveries[1].subject)
        input.recipient.locale = nil
        plan = assert(digest_rules.generation:render_digest(json.encode(input)))
        assert.are.equal("2 comments", plan[1].deliveries[1].subject)
    end)
end)

describe("content per locale: load errors", function()
    local function problems(rule_body)
        local _, err = testing.try_load_source('local crier = require "crier"\n'
            .. 'crier.event_type "x" { payload = { n = "integer" } }\n'
            .. 'crier.rule "x" {\n  recipients = { "a" }, channels = { "email" },\n' .. rule_body .. "}\n",
            { path = "/rules/x.lua" })
        assert.is_string(err)
        return err
    end
    local email = 'email = { to = "a@b.test", subject = "s", text = "t", locales = %s },\n'

    it("names a bad locale tag", function()
        assert.matches('/rules/x.lua:3: rule \'x\': email.locales: "german" is not a locale tag', problems(
            email:format('{ german = { subject = "x" } }')), 1, true)
        assert.matches("/rules/x.lua:3: rule 'x': locale (the language of the rule's content): \"english\" is "
            .. "not a locale tag", problems('locale = "english",\n' .. email:format("{}")), 1, true)
    end)

    it("names an unknown field of a locale block", function()
        assert.matches("/rules/x.lua:3: rule 'x': email.locales[\"de\"]: unknown field 'subjekt' (a locale "
            .. "translates: digest, html, subject, text)", problems(email:format('{ de = { subjekt = "x" } }')),
            1, true)
        assert.matches("email.locales[\"de\"].digest: the block has no digest to translate",
            problems(email:format('{ de = { digest = { subject = "x" } } }')), 1, true)
        assert.matches("email.locales[\"de\"] must be a table", problems(email:format('{ de = "x" }')), 1, true)
        assert.matches('email.locales: "de-AT" and "de_at" are the same locale',
            problems(email:format('{ ["de-AT"] = {}, de_at = {} }')), 1, true)
    end)

    it("names a template that does not compile, with the locale, line and column", function()
        assert.matches("/rules/x.lua:3: rule 'x': email.locales[\"de\"].subject:1: unknown filter 'uper' "
            .. "(column 8)", problems(email:format('{ de = { subject = "{{ n | uper }}" } }')), 1, true)
        assert.matches("email.locales[\"pl\"].text:2: plural: the form for 'other' is missing",
            problems(email:format([[{ pl = { text = "x\n{{ payload.n | plural(one='a') }}" } }]])), 1, true)
        assert.matches("email.locales[\"de\"].text:1: template uses payload.m, which event type x does not "
            .. "declare", problems(email:format('{ de = { text = "{{ payload.m }}" } }')), 1, true)
    end)
end)

-- Collaboration: comments, mentions, build alerts and invoice reminders for a
-- team app — the story of time in rules (docs/RULES.md, "Time: delay,
-- throttle, digest").
--
-- comment.created  the post's watchers see the comment in their feed at once,
--                  and get one email per hour listing the new comments (a
--                  digest: the first comment opens the hour; at most 25 per
--                  email, a fuller one goes at once). In English, and in
--                  German for watchers whose locale is de (or de-AT, de-CH;
--                  docs/RULES.md, "Locales").
-- mention.created  the person mentioned sees it in their feed at once; an
--                  email follows 10 minutes later only if the item is still
--                  unread (and not in their night: quiet hours 22:00-07:00 in
--                  their time zone hold it until the morning, unless they
--                  stored their own), and the team's on-call webhook hears
--                  about it after an hour if it is still unread then: an
--                  escalation chain, written as a rule.
-- build.failed     the repo's owners by webhook, at most 3 per hour per repo;
--                  the rest are folded into an hourly digest instead of being
--                  dropped.
-- invoice.overdue  a reminder email a day later, cancelled when invoice.paid
--                  arrives for the same invoice in the meantime.
-- team.daily       every morning at 08:00 Berlin time (the schedule
--                  "daily-summary": crier emits it, once, whatever daemons
--                  run), the team's feed gets a reminder to catch up; a
--                  morning missed while every daemon was down is made up once.
--
-- Settings: collaboration_from (the sender address), collaboration_oncall_url
-- and collaboration_builds_url (webhook endpoints).
local crier = require "crier"

local sender = crier.setting("collaboration_from", "team@example.com")
local oncall_url = crier.setting("collaboration_oncall_url", "http://127.0.0.1:8080/hooks/oncall")
local builds_url = crier.setting("collaboration_builds_url", "http://127.0.0.1:8080/hooks/builds")

crier.event_type "comment.created" {
    description = "Someone commented on a post; its watchers hear about it",
    payload = {
        post = "string", post_title = "string", author = "string", text = "string",
        watchers = "array", -- { { id = "...", email = "..." }, ... }
    },
}

crier.event_type "mention.created" {
    description = "Someone mentioned a person in a comment",
    payload = { person = "string", email = "string", author = "string", post_title = "string", url = "string",
                tz = "string?" }, -- the person's IANA time zone, such as "Europe/Berlin"
}

crier.event_type "build.failed" {
    description = "A CI build failed on a repository",
    payload = { repo = "string", branch = "string", build = "integer", owners = "array" },
}

crier.event_type "invoice.overdue" {
    description = "An invoice is past its due date",
    payload = { invoice_id = "string", customer_email = "string", amount_cents = "integer", currency = "string" },
}

crier.event_type "invoice.paid" {
    description = "An invoice was paid (cancels its pending overdue reminder)",
    payload = { invoice_id = "string" },
}

crier.event_type "team.daily" {
    description = "Every morning, from the daily-summary schedule",
    payload = { schedule = "string", occurrence = "string" },
}

crier.schedule "daily-summary" {
    description = "The team's morning reminder",
    cron = "0 8 * * *", time_zone = "Europe/Berlin", tenants = { "acme" },
    event = "team.daily", catch_up = "latest",
}

crier.rule "comment.created" {
    locale = "en", -- the blocks' own text; locales = { de = ... } below
    recipients = function(event)
        local out = {}
        for _, w in ipairs(event.payload.watchers) do
            if w.id ~= event.payload.author then
                out[#out + 1] = w
            end
        end
        return out
    end,
    channels = function(_, watcher)
        return watcher.email and { "feed", "email" } or { "feed" }
    end,
    feed = {
        title = "{{ payload.author }} commented on {{ payload.post_title }}", body = "{{ payload.text }}",
        locales = { de = { title = "{{ payload.author }} hat {{ payload.post_title }} kommentiert" } },
    },
    email = {
        from = sender,
        subject = "New comment on {{ payload.post_title }}",
        locales = {
            de = {
                subject = "Neuer Kommentar zu {{ payload.post_title }}",
                digest = { subject = "{{ digest.count | plural(one='# neuer Kommentar', other='# neue Kommentare') }} "
                    .. "zu {{ digest.last.payload.post_title }}" },
            },
        },
        text = "{{ payload.author }}: {{ payload.text }}",
        digest = {
            window = "1h",
            key = function(event) return "comments:" .. event.payload.post end,
            max_items = 25,
            subject = "{{ digest.count }} new comment{% if digest.count != 1 %}s{% endif %} on "
                .. "{{ digest.last.payload.post_title }}",
            text = [[
{% for c in digest.items %}- {{ c.payload.author }}: {{ c.payload.text | truncate(200) }}
{% endfor %}]],
        },
    },
}

crier.rule "mention.created" {
    recipients = function(event)
        return { { id = event.payload.person, email = event.payload.email, time_zone = event.payload.tz } }
    end,
    channels = { "feed", "email", "webhook" },
    feed = { title = "{{ payload.author }} mentioned you in {{ payload.post_title }}", url = "{{ payload.url }}" },
    email = {
        from = sender,
        subject = "{{ payload.author }} mentioned you",
        text = "{{ payload.author }} mentioned you in {{ payload.post_title }}: {{ payload.url }}",
        delay = "10m", unless = "read",
        quiet_hours = { from = "22:00", to = "07:00" }, -- in the person's zone; their stored setting wins
    },
    webhook = {
        url = oncall_url,
        body = [[{"text": "{{ payload.person }} has not read a mention by {{ payload.author }} for an hour"}]],
        delay = "1h", unless = "read",
    },
}

crier.rule "build.failed" {
    recipients = function(event) return event.payload.owners end,
    channels = { "webhook" },
    webhook = {
        url = builds_url,
        body = function(event)
            return { text = "Build " .. event.payload.build .. " failed on " .. event.payload.repo .. "@"
                .. event.payload.branch }
        end,
        throttle = { limit = 3, per = "1h", key = function(event) return event.payload.repo end },
        digest = {
            window = "1h",
            key = function(event) return "builds:" .. event.payload.repo end,
            body = function(event)
                local builds = {}
                for i, item in ipairs(event.digest.items) do
                    builds[i] = item.payload.build
                end
                return { text = event.digest.count .. " more builds failed on " .. event.payload.repo,
                         builds = builds }
            end,
        },
    },
}

crier.rule "invoice.overdue" {
    recipients = function(event)
        return { { id = event.payload.customer_email, email = event.payload.customer_email } }
    end,
    channels = { "email" },
    email = {
        from = sender,
        subject = "Invoice {{ payload.invoice_id }} is overdue",
        text = "{{ payload.amount_cents | money(payload.currency) }} are due for invoice {{ payload.invoice_id }}.",
        delay = "1d", cancel_on = { "invoice.paid" },
    },
}

crier.rule "team.daily" {
    recipients = { "team" },
    channels = { "feed" },
    feed = { title = "Good morning: catch up on yesterday's comments", body = "{{ payload.occurrence }}" },
}

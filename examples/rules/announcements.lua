-- Announcements and security alerts for everyone in an organisation.
--
-- org.announcement goes to every member of the org (a large audience: read
-- page by page from the application's app.members table with crier.pages, one
-- page per fan-out batch), by email when the member has an address and by
-- webhook to the in-app bridge. Members may mute announcements (stored
-- preferences, honoured by default).
--
-- security.alert goes to the org's admins by email; it is required = true, so
-- no stored preference can mute it.
--
-- The queries only run when such an event is emitted: loading these rules
-- (crier check, crier serve) needs no app.members table. They run as the
-- unprivileged role crier_rules, which reads only what you grant it:
--   GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.members TO crier_rules;
-- Settings: announcements_webhook_url (the in-app bridge), announcements_from
-- (the sender address).
local crier = require "crier"

local webhook_url = crier.setting("announcements_webhook_url", "http://127.0.0.1:8080/hooks/announcements")
local sender = crier.setting("announcements_from", "news@example.com")

-- One page of an org's members, after the cursor ($2), at most $3 rows,
-- ordered by the cursor column. user_id is text, so the first cursor is ''.
local members_page = crier.query("org_members_page", [[
    SELECT user_id AS id, email, display_name AS name
    FROM app.members
    WHERE org = $1 AND user_id > $2
    ORDER BY user_id
    LIMIT $3]])

local org_admins = crier.query("org_admins", [[
    SELECT user_id AS id, email, display_name AS name
    FROM app.members
    WHERE org = $1 AND role = 'admin' AND email IS NOT NULL
    ORDER BY user_id]])

crier.event_type "org.announcement" {
    description = "A message from an organisation to all its members",
    payload = {
        org = "string",
        title = "string",
        body = "string",
        highlights = "array?",  -- list of short strings
        starts_at = "string?",  -- ISO-8601, for events and launches
        price_cents = "integer?",
        currency = "string?",   -- required when price_cents is given
    },
    required = false, -- the default: members' preferences may mute it
}

crier.event_type "security.alert" {
    description = "Something happened that an org's admins must hear about",
    payload = { org = "string", kind = "string", at = "string", ip = "string?" },
    required = true, -- preferences cannot mute it
    retry = { email = { 0, "30s", "2m", "10m", "30m" } },
}

crier.rule "org.announcement" {
    description = "Every member of the org, by email (when they have an address) and by webhook",
    recipients = crier.pages {
        query = members_page,
        params = function(event)
            return { event.payload.org }
        end,
        cursor = "id",
        first = "",
        page_size = 500,
    },
    channels = function(_, member)
        if member.email then
            return { "email", "webhook" }
        end
        return { "webhook" }
    end,
    email = {
        from = sender,
        subject = "[{{ payload.org | upper }}] {{ payload.title | truncate(60) }}",
        text = [[
Hello {{ recipient.name | default('there') }},

{{ payload.body }}
{%- if payload.highlights %}

Highlights:
{%- for item in payload.highlights %}
  {{ loop.index }}. {{ item }}
{%- endfor %}
{%- endif %}
{%- if payload.starts_at %}

When: {{ payload.starts_at | date('%A %d %B %Y, %H:%M UTC') }}
{%- endif %}
{%- if payload.price_cents == null %}
{%- elif payload.price_cents == 0 %}

Free of charge.
{%- else %}

Price: {{ payload.price_cents | money(payload.currency, ',') }}
{%- endif %}

-- You get this because you are a member of {{ payload.org }}. {#- the footer of every announcement #}
]],
        -- every inserted value is HTML-escaped (there is no "safe" filter)
        html = [[
<h1>{{ payload.title }}</h1>
<p>Hello {{ recipient.name | default('there') }},</p>
<p>{{ payload.body }}</p>
{%- if payload.highlights %}
<ol>
{%- for item in payload.highlights %}
  <li{% if loop.first %} class="first"{% endif %}>{{ item }}</li>
{%- endfor %}
</ol>
{%- endif %}
{%- if payload.starts_at %}
<p>When: {{ payload.starts_at | date('%A %d %B %Y, %H:%M UTC') }}</p>
{%- endif %}
{%- if payload.price_cents == null %}
{%- elif payload.price_cents == 0 %}
<p>Free of charge.</p>
{%- else %}
<p>Price: {{ payload.price_cents | money(payload.currency, ',') }}</p>
{%- endif %}
]],
    },
    webhook = {
        url = webhook_url,
        -- a JSON template: every inserted value is escaped for the inside of a
        -- JSON string, so values go between quotes
        body = '{"kind": "announcement", "org": "{{ payload.org }}", "member": "{{ recipient.id }}", '
            .. '"title": "{{ payload.title }}", "event_id": "{{ id }}"}',
    },
}

crier.rule "security.alert" {
    description = "The org's admins, by email; required: preferences cannot mute it",
    recipients = function(event)
        return org_admins(event.payload.org)
    end,
    channels = { "email" },
    email = {
        from = sender,
        subject = "Security alert for {{ payload.org }}: "
            .. "{% if payload.kind == 'new_login' %}new sign-in"
            .. "{% elif payload.kind == 'key_created' %}new API key"
            .. "{% else %}{{ payload.kind }}{% endif %}",
        text = [[
Hello {{ recipient.name | default('there') }},

{% if payload.kind == 'new_login' -%}
Someone signed in to {{ payload.org }}
{%- if payload.ip %} from {{ payload.ip }}{% endif %} on {{ payload.at | date('%F at %T %Z') }}.
{%- elif payload.kind == 'key_created' -%}
An API key was created for {{ payload.org }} on {{ payload.at | date('%F at %T %Z') }}.
{%- else -%}
Security event "{{ payload.kind }}" in {{ payload.org }} on {{ payload.at | date('%F at %T %Z') }}.
{%- endif %}

If this was not you or a colleague, rotate your credentials now.
]],
    },
}

-- Languages (issue 18): the user's locale (a language tag such as `fr`), taken from
-- Accept-Language at sign-up; transactional emails use `name.<locale>.*` templates when shipped.
ALTER TABLE users ADD COLUMN locale text;
